"""Transport security shared by the plugin server, the shim and the clients: PEM files,
serving credentials that follow rotation, client credentials, and a small CA."""
