"""Send the client certificate alone, not the chain OpenSSL would build for it.

With no chain of its own configured, OpenSSL completes a client certificate's
chain from the context's trust store before sending it, and that store holds
the CA the client loaded to verify the API server: the server receives the
certificate and the CA that issued it (seen with ``openssl s_server -msg``:
two certificates in the client's Certificate message). kube-apiserver's x509
authenticator (k8s.io/apiserver pkg/authentication/request/x509/x509.go,
``AuthenticateRequest``) verifies every request's certificate afresh, with
the certificates after the first as intermediates, so a CA sent as an
intermediate as well as known as a root makes Go's chain building check the
signature more than once, for every request (docs/benchmarks.md has the
profile). client-go sends what the kubeconfig holds, the certificate alone.

``SSL_MODE_NO_AUTO_CHAIN`` turns that completion off. Python's ``ssl`` module
has no call for it, so ``send_own_certificate_only`` sets it through ctypes
on the context's ``SSL_CTX``, where CPython keeps it (``Modules/_ssl.c``,
``PySSLContext``: the first field after the object header). It does so only
where that layout is the one known (CPython, 64-bit, a default build), checks
the pointer by reading the context's options back through OpenSSL first, and
otherwise leaves the context as it is: the requests then carry the CA,
which costs the API server a little more and changes nothing else.
"""

from __future__ import annotations

import ctypes
import logging
import ssl
import sys
import sysconfig

import urllib3

log = logging.getLogger(__name__)

# openssl/ssl.h
SSL_CTRL_MODE = 33
SSL_MODE_NO_AUTO_CHAIN = 0x8

# PyObject_HEAD of a default 64-bit CPython build: reference count and type.
_OBJECT_HEAD = 16


def _libssl() -> ctypes.CDLL | None:
    import _ssl

    path = getattr(_ssl, "__file__", None)
    try:
        # dlsym on the extension's handle also searches the libssl it links.
        lib = ctypes.CDLL(path) if path else ctypes.CDLL(None)
        get_options = lib.SSL_CTX_get_options
        ctrl = lib.SSL_CTX_ctrl
    except (OSError, AttributeError):
        return None
    get_options.restype = ctypes.c_uint64
    get_options.argtypes = [ctypes.c_void_p]
    ctrl.restype = ctypes.c_long
    ctrl.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_long, ctypes.c_void_p]
    return lib


def _known_layout() -> bool:
    return (
        sys.implementation.name == "cpython"
        and ctypes.sizeof(ctypes.c_void_p) == 8
        and sys.getsizeof(object()) == _OBJECT_HEAD
        and not sysconfig.get_config_var("Py_GIL_DISABLED")
        and ssl.OPENSSL_VERSION_INFO >= (1, 1, 0)
    )


def send_own_certificate_only(context: ssl.SSLContext) -> bool:
    """Sets ``SSL_MODE_NO_AUTO_CHAIN`` on ``context``; True when it is set.

    Call it before the first connection: a handshake sends the chain the
    context had when it started."""
    if not _known_layout():
        return False
    lib = _libssl()
    if lib is None:
        return False
    pointer = ctypes.c_void_p.from_address(id(context) + _OBJECT_HEAD).value
    if not pointer:
        return False
    # The pointer is the SSL_CTX if OpenSSL reads back the options Python
    # reports for the context, before and after one of them is flipped.
    probe = ssl.OP_NO_TICKET
    had = bool(context.options & probe)
    if lib.SSL_CTX_get_options(pointer) != int(context.options):
        return False
    context.options ^= probe
    try:
        if lib.SSL_CTX_get_options(pointer) != int(context.options):
            return False
    finally:
        if had:
            context.options |= probe
        else:
            context.options &= ~probe
    mode = lib.SSL_CTX_ctrl(pointer, SSL_CTRL_MODE, SSL_MODE_NO_AUTO_CHAIN, None)
    return bool(mode & SSL_MODE_NO_AUTO_CHAIN)


def client_context(
    *,
    verify: bool,
    ca_file: str | None = None,
    ca_data: str | None = None,
    cert_file: str | None = None,
    key_file: str | None = None,
) -> ssl.SSLContext:
    """The client context urllib3 would build from the kubernetes package's pool
    arguments (kubernetes/client/rest.py ``RESTClientObject``), loaded once: the
    CA (the system's when none is given) and hostname checks when ``verify``, the
    client certificate sent alone where ``send_own_certificate_only`` can."""
    context = urllib3.util.ssl_.create_urllib3_context(
        cert_reqs=ssl.CERT_REQUIRED if verify else ssl.CERT_NONE
    )
    if verify:
        if ca_file or ca_data:
            context.load_verify_locations(cafile=ca_file or None, cadata=ca_data or None)
        else:
            context.load_default_certs()
        context.check_hostname = True
    if cert_file:
        context.load_cert_chain(cert_file, key_file or None)
        if not send_own_certificate_only(context):
            log.debug("client certificate: OpenSSL may send the CA with it")
    return context


__all__ = ["client_context", "send_own_certificate_only"]
