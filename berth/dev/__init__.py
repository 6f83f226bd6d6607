"""Developer tools: a local control plane, the demo and the benchmarks. Part of a
checkout, not of the wheel or the image."""
