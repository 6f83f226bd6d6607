"""Kubernetes access: one HTTP client for the API server and what it stands on.

- `config`: a kubeconfig or the in-cluster service account, through the ``kubernetes``
  package's loaders, to a ``kubernetes.client.Configuration`` (client-go's clientcmd and
  rest.InClusterConfig); a plain kubeconfig and the service account to a
  ``config.PlainConfiguration`` with the same attributes, without importing the package.
- `rest`: `rest.KubeApi`, raw JSON requests, paged lists and watches over urllib3, writes
  through a token bucket and, with leader election, a write fence (client-go rest).
- `errors`: `errors.ApiError`, what every request raises for an error status or an
  unreachable server (k8s.io/apimachinery/pkg/api/errors).
- `flowcontrol`: `flowcontrol.TokenBucket`, client-go's QPS and burst limiter.
- `asynchttp` and `http1`: the same requests from the event loop over keep-alive
  HTTP/1.1 connections; `tlschain`: the client certificate sent without its CA.
- `records`: Kubernetes objects (decoded JSON or YAML) to berth.v1 records.

The shim, the CLI and the dev tools (local cluster, demo, bench) all reach the API server
through these modules; nothing here imports them.
"""
