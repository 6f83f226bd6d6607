"""DynamicResources: upstream's pkg/scheduler/framework/plugins/dynamicresources
with the structured allocator of k8s.io/dynamic-resource-allocation."""
