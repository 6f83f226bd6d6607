// Berth's addition to a temporary copy of k8s.io/dynamic-resource-allocation
// (hack/gen-dra-allocator-cases.sh copies it there): after each case of
// upstream's shared allocator test passes against the implementation under
// test, write its inputs and upstream's actual answer as one JSON line, so
// Berth's Python port is checked against the same cases.

package allocatortesting

import (
	"encoding/json"
	"os"
	"sync"

	"github.com/onsi/gomega/matchers"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/structured/internal"
)

var dumpMutex sync.Mutex

type dumpedDeviceID struct {
	Driver  string `json:"driver"`
	Pool    string `json:"pool"`
	Device  string `json:"device"`
	ShareID string `json:"shareID,omitempty"`
}

type dumpedCapacity struct {
	dumpedDeviceID
	Capacity map[string]string `json:"capacity"`
}

type dumpedCase struct {
	Name                     string                             `json:"name"`
	Features                 map[string]bool                    `json:"features"`
	AllocatedDevices         []dumpedDeviceID                   `json:"allocatedDevices"`
	AllocatedSharedDeviceIDs []dumpedDeviceID                   `json:"allocatedSharedDeviceIDs"`
	AllocatedCapacity        []dumpedCapacity                   `json:"allocatedCapacity"`
	Classes                  []*resourceapi.DeviceClass         `json:"classes"`
	Slices                   []*resourceapi.ResourceSlice       `json:"slices"`
	NodeName                 string                             `json:"nodeName"`
	NodeLabels               map[string]string                  `json:"nodeLabels"`
	Claims                   []*resourceapi.ResourceClaim       `json:"claims"`
	Results                  []resourceapi.AllocationResult     `json:"results"`
	Error                    string                             `json:"error,omitempty"`
	ErrorSubstring           string                             `json:"errorSubstring,omitempty"`
	NumAllocateOne           int64                              `json:"numAllocateOne,omitempty"`
	ExpectNumAllocateOne     int64                              `json:"expectNumAllocateOne,omitempty"`
}

func dumpCase(name string, tc AllocatorTestCase, node *v1.Node, allocator Allocator, results []resourceapi.AllocationResult, err error) {
	path := os.Getenv("BERTH_DUMP_CASES")
	if path == "" {
		return
	}
	d := dumpedCase{
		Name: name,
		Features: map[string]bool{
			"adminAccess":            tc.features.AdminAccess,
			"consumableCapacity":     tc.features.ConsumableCapacity,
			"deviceBindingAndStatus": tc.features.DeviceBindingAndStatus,
			"deviceTaints":           tc.features.DeviceTaints,
			"listTypeAttributes":     tc.features.ListTypeAttributes,
			"partitionableDevices":   tc.features.PartitionableDevices,
			"prioritizedList":        tc.features.PrioritizedList,
		},
		Classes:    tc.classes,
		Slices:     tc.slices,
		NodeName:   node.Name,
		NodeLabels: node.Labels,
		Claims:     unwrap(tc.claimsToAllocate...),
		Results:    results,
	}
	for _, id := range tc.allocatedDevices {
		d.AllocatedDevices = append(d.AllocatedDevices, dumpedDeviceID{Driver: id.Driver.String(), Pool: id.Pool.String(), Device: id.Device.String()})
	}
	for id := range tc.allocatedSharedDeviceIDs {
		d.AllocatedSharedDeviceIDs = append(d.AllocatedSharedDeviceIDs, dumpedDeviceID{Driver: id.Driver.String(), Pool: id.Pool.String(), Device: id.Device.String(), ShareID: id.ShareID.String()})
	}
	for id, consumed := range tc.allocatedCapacityDevices {
		c := dumpedCapacity{dumpedDeviceID: dumpedDeviceID{Driver: id.Driver.String(), Pool: id.Pool.String(), Device: id.Device.String()}, Capacity: map[string]string{}}
		for name, q := range consumed {
			c.Capacity[string(name)] = q.String()
		}
		d.AllocatedCapacity = append(d.AllocatedCapacity, c)
	}
	if err != nil {
		d.Error = err.Error()
	}
	if me, ok := tc.expectError.(*matchers.MatchErrorMatcher); ok {
		if cs, ok := me.Expected.(*matchers.ContainSubstringMatcher); ok {
			d.ErrorSubstring = cs.Substr
		}
	}
	if ext, ok := allocator.(internal.AllocatorExtended); ok {
		d.NumAllocateOne = ext.GetStats().NumAllocateOneInvocations
	}
	if tc.expectNumAllocateOneInvocations > 0 {
		d.ExpectNumAllocateOne = tc.expectNumAllocateOneInvocations
		if override, ok := tc.expectNumAllocateOneInvocationsByChannel[allocator.Channel()]; ok {
			d.ExpectNumAllocateOne = override
		}
	}
	line, jerr := json.Marshal(d)
	if jerr != nil {
		panic(jerr)
	}
	dumpMutex.Lock()
	defer dumpMutex.Unlock()
	f, ferr := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if ferr != nil {
		panic(ferr)
	}
	defer f.Close()
	if _, werr := f.Write(append(line, '\n')); werr != nil {
		panic(werr)
	}
}
