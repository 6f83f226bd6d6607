"""The stateless gRPC plugin server: runs a profile's plugin chain per RPC."""
