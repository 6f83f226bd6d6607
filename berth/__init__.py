"""Berth: a Kubernetes scheduler whose plugins are Python, served over gRPC."""

__version__ = "0.1.0"
