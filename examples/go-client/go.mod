module berth.dev/examples/go-client

go 1.26.0

require (
	berth.dev/berth/gen/go v0.0.0-00010101000000-000000000000
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)

// The generated code is committed in this repository (hack/gen-go.sh).
replace berth.dev/berth/gen/go => ../../gen/go
