"""Transport security the plugin server and the shim share: PEM files, serving
credentials that follow rotation, and a small CA (``berth certs``). The gRPC
client's flags and channel credentials are berth.client.tls."""
