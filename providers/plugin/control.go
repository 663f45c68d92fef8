//go:build linux

package plugin

import (
	"context"
	"encoding/json"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The control service. Its messages are JSON carried in a
// wrapperspb.BytesValue: the calls are few, small and off the packet
// path, and this keeps a protoc step out of the build. The service is
// described by hand below, as protoc-gen-go-grpc would.
const serviceName = "vroce.plugin.v1.Provider"

// controlServer is what a plugin serves: serve.go's pluginServer.
type controlServer interface {
	hello(ctx context.Context, _ struct{}) (Description, error)
	open(ctx context.Context, req openRequest) (openReply, error)
	close(ctx context.Context, req deviceRequest) (struct{}, error)
	stats(ctx context.Context, req deviceRequest) (statsReply, error)
	deviceAddr(ctx context.Context, req deviceAddrRequest) (deviceAddrReply, error)
	// events sends every event until ctx ends.
	events(ctx context.Context, send func(event) error) error
}

var controlDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*controlServer)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Hello", Handler: unary(controlServer.hello)},
		{MethodName: "Open", Handler: unary(controlServer.open)},
		{MethodName: "Close", Handler: unary(controlServer.close)},
		{MethodName: "Stats", Handler: unary(controlServer.stats)},
		{MethodName: "DeviceAddr", Handler: unary(controlServer.deviceAddr)},
	},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Events",
		ServerStreams: true,
		Handler: func(srv any, stream grpc.ServerStream) error {
			if err := stream.RecvMsg(new(wrapperspb.BytesValue)); err != nil {
				return err
			}
			return srv.(controlServer).events(stream.Context(), func(e event) error {
				b, err := json.Marshal(e)
				if err != nil {
					return err
				}
				return stream.SendMsg(wrapperspb.Bytes(b))
			})
		},
	}},
}

// unary makes a gRPC handler of a call that takes and returns Go values.
func unary[Req, Rep any](call func(controlServer, context.Context, Req) (Rep, error)) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	return func(srv any, ctx context.Context, dec func(any) error, intercept grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.BytesValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		handle := func(ctx context.Context, in any) (any, error) {
			var req Req
			if err := json.Unmarshal(in.(*wrapperspb.BytesValue).GetValue(), &req); err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "vroce plugin: request: %v", err)
			}
			rep, err := call(srv.(controlServer), ctx, req)
			if err != nil {
				return nil, status.Error(codes.Unknown, err.Error())
			}
			b, err := json.Marshal(rep)
			if err != nil {
				return nil, err
			}
			return wrapperspb.Bytes(b), nil
		}
		if intercept == nil {
			return handle(ctx, in)
		}
		return intercept(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + serviceName}, handle)
	}
}

// controlClient calls a plugin's control service.
type controlClient struct{ conn *grpc.ClientConn }

// call invokes method with req and decodes its reply into rep.
func (c controlClient) call(ctx context.Context, method string, req, rep any) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	out := new(wrapperspb.BytesValue)
	if err := c.conn.Invoke(ctx, "/"+serviceName+"/"+method, wrapperspb.Bytes(b), out); err != nil {
		if s, ok := status.FromError(err); ok {
			return fmt.Errorf("%s", s.Message())
		}
		return err
	}
	if rep == nil {
		return nil
	}
	if err := json.Unmarshal(out.GetValue(), rep); err != nil {
		return fmt.Errorf("vroce plugin: %s reply: %w", method, err)
	}
	return nil
}

// events calls handle with each event the plugin sends until ctx ends or
// the stream breaks.
func (c controlClient) events(ctx context.Context, handle func(event)) error {
	stream, err := c.conn.NewStream(ctx, &controlDesc.Streams[0], "/"+serviceName+"/Events")
	if err != nil {
		return err
	}
	if err := stream.SendMsg(wrapperspb.Bytes(nil)); err != nil {
		return err
	}
	if err := stream.CloseSend(); err != nil {
		return err
	}
	for {
		in := new(wrapperspb.BytesValue)
		if err := stream.RecvMsg(in); err != nil {
			return err
		}
		var e event
		if err := json.Unmarshal(in.GetValue(), &e); err != nil {
			return fmt.Errorf("vroce plugin: event: %w", err)
		}
		handle(e)
	}
}
