"""The named scheduler (watch, queue, call the service, bind): not built yet.

See shim/README.md for what goes here.
"""
