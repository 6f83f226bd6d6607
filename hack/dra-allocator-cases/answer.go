// Berth's addition to a temporary copy of k8s.io/dynamic-resource-allocation
// (hack/gen-dra-allocator-cases.sh copies it to structured/internal/berthanswer):
// reads allocation problems as JSON lines on stdin and writes each with the
// answer of upstream's incubating allocator (results, or error text, and the
// number of allocateOne steps), so Berth's port can be compared with it on
// generated problems.

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured/internal"
	"k8s.io/dynamic-resource-allocation/structured/internal/incubating"
)

type deviceID struct {
	Driver  string `json:"driver"`
	Pool    string `json:"pool"`
	Device  string `json:"device"`
	ShareID string `json:"shareID,omitempty"`
}

type capacityEntry struct {
	deviceID
	Capacity map[string]string `json:"capacity"`
}

type problem struct {
	Name                     string                           `json:"name"`
	Features                 map[string]bool                  `json:"features"`
	AllocatedDevices         []deviceID                       `json:"allocatedDevices"`
	AllocatedSharedDeviceIDs []deviceID                       `json:"allocatedSharedDeviceIDs"`
	AllocatedCapacity        []capacityEntry                  `json:"allocatedCapacity"`
	Classes                  []*resourceapi.DeviceClass       `json:"classes"`
	Slices                   []*resourceapi.ResourceSlice     `json:"slices"`
	NodeName                 string                           `json:"nodeName"`
	NodeLabels               map[string]string                `json:"nodeLabels"`
	Claims                   []*resourceapi.ResourceClaim     `json:"claims"`
	Results                  []resourceapi.AllocationResult   `json:"results"`
	Error                    string                           `json:"error,omitempty"`
	NumAllocateOne           int64                            `json:"numAllocateOne,omitempty"`
}

type classLister []*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) { return l, nil }

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	for _, c := range l {
		if c.Name == name {
			return c, nil
		}
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64<<20), 64<<20)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for in.Scan() {
		var p problem
		if err := json.Unmarshal(in.Bytes(), &p); err != nil {
			panic(err)
		}
		features := internal.Features{
			AdminAccess:            p.Features["adminAccess"],
			ConsumableCapacity:     p.Features["consumableCapacity"],
			DeviceBindingAndStatus: p.Features["deviceBindingAndStatus"],
			DeviceTaints:           p.Features["deviceTaints"],
			PartitionableDevices:   p.Features["partitionableDevices"],
			PrioritizedList:        p.Features["prioritizedList"],
		}
		state := internal.AllocatedState{
			AllocatedDevices:         sets.New[internal.DeviceID](),
			AllocatedSharedDeviceIDs: sets.New[internal.SharedDeviceID](),
			AggregatedCapacity:       internal.NewConsumedCapacityCollection(),
		}
		for _, d := range p.AllocatedDevices {
			state.AllocatedDevices.Insert(internal.MakeDeviceID(d.Driver, d.Pool, d.Device))
		}
		for _, d := range p.AllocatedCapacity {
			consumed := map[resourceapi.QualifiedName]resource.Quantity{}
			for name, q := range d.Capacity {
				consumed[resourceapi.QualifiedName(name)] = resource.MustParse(q)
			}
			state.AggregatedCapacity.Insert(internal.NewDeviceConsumedCapacity(internal.MakeDeviceID(d.Driver, d.Pool, d.Device), consumed))
		}
		cache := cel.NewCache(100, cel.Features{EnableConsumableCapacity: features.ConsumableCapacity})
		allocator, err := incubating.NewAllocator(context.Background(), features, state, classLister(p.Classes), p.Slices, cache)
		if err != nil {
			panic(err)
		}
		node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: p.NodeName, Labels: p.NodeLabels}}
		results, err := allocator.Allocate(context.Background(), node, p.Claims)
		p.Results = results
		if err != nil {
			p.Error = err.Error()
		}
		p.NumAllocateOne = allocator.GetStats().NumAllocateOneInvocations
		line, err := json.Marshal(p)
		if err != nil {
			panic(err)
		}
		out.Write(append(line, '\n'))
	}
	if err := in.Err(); err != nil {
		panic(err)
	}
}
