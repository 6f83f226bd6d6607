"""The named scheduler: ``berth shim`` watches the API server, queues pending pods, runs
each scheduling cycle on the plugin service (gRPC or in-process) and binds.

See shim/README.md for the pieces and the promises they keep.
"""
