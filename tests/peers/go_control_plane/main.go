// Command xds-peer serves xDS from go-control-plane's public packages for the interop tests.
//
// It listens on 127.0.0.1 (port 0 unless -port says otherwise), prints
// {"event":"listening","port":N} on stdout, then reads commands as JSON lines on
// stdin and answers each with {"event":"reply",...}. Every request the server
// receives and every response it sends is logged on stdout as a JSON line, so a
// test can assert what reached the server. Resources travel base64-encoded, as
// serialized protobufs with their type URL.
//
// Commands ("id" is echoed in the reply):
//
//	{"op":"set_snapshot","node":"n1","version":"1","versions":{TYPE:"2"},
//	 "resources":{TYPE:[{"value":B64,"ttl_ms":0}]}}
//	{"op":"clear_snapshot","node":"n1"}
//	{"op":"upsert","type_url":TYPE,"value":B64}      (the linear cache's type only)
//	{"op":"remove","name":"c1"}                      (from the linear cache)
//	{"op":"stop"} {"op":"start"} {"op":"restart"}    (the gRPC server, same port)
//	{"op":"quit"}
package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	// The resource types the peer serves, linked so that anypb can decode them.
	_ "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/log"
	server "github.com/envoyproxy/go-control-plane/pkg/server/v3"
)

// out serializes every JSON line written to stdout.
type out struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (o *out) emit(v map[string]any) {
	line, err := json.Marshal(v)
	if err != nil {
		line, _ = json.Marshal(map[string]any{"event": "error", "error": err.Error()})
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.w.Write(line)
	o.w.WriteByte('\n')
	o.w.Flush()
}

// peer holds the caches, the xDS server and the gRPC server that can be stopped and restarted.
type peer struct {
	out      *out
	ctx      context.Context
	snapshot cache.SnapshotCache
	linear   *cache.LinearCache // nil unless -linear names a type
	xds      server.Server
	port     int

	mu   sync.Mutex
	grpc *grpc.Server
}

func main() {
	port := flag.Int("port", 0, "port on 127.0.0.1 (0 picks a free one)")
	ads := flag.Bool("ads", true, "run the snapshot cache in ADS mode")
	linearType := flag.String("linear", "", "serve this type URL from a LinearCache")
	heartbeat := flag.Duration("heartbeat", 0, "heartbeat interval for resources with a TTL (0: none)")
	flag.Parse()

	o := &out{w: bufio.NewWriter(os.Stdout)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	p := &peer{out: o, ctx: ctx}
	if *heartbeat > 0 {
		p.snapshot = cache.NewSnapshotCacheWithHeartbeating(ctx, *ads, cache.IDHash{}, quietLogger{}, *heartbeat)
	} else {
		p.snapshot = cache.NewSnapshotCache(*ads, cache.IDHash{}, quietLogger{})
	}
	var served cache.Cache = p.snapshot
	if *linearType != "" {
		p.linear = cache.NewLinearCache(*linearType, cache.WithLogger(quietLogger{}))
		linearURL := *linearType
		pick := func(typeURL string) string {
			if typeURL == linearURL {
				return "linear"
			}
			return "snapshot"
		}
		served = &cache.MuxCache{
			Classify:      func(r *cache.Request) string { return pick(r.GetTypeUrl()) },
			ClassifyDelta: func(r *cache.DeltaRequest) string { return pick(r.GetTypeUrl()) },
			Caches:        map[string]cache.Cache{"linear": p.linear, "snapshot": p.snapshot},
		}
	}
	p.xds = server.NewServer(ctx, served, p.callbacks())

	if err := p.start(*port); err != nil {
		o.emit(map[string]any{"event": "fatal", "error": err.Error()})
		os.Exit(1)
	}
	o.emit(map[string]any{"event": "listening", "port": p.port})

	scanner := bufio.NewScanner(os.Stdin)
	scanner.Buffer(make([]byte, 1<<20), 1<<30)
	for scanner.Scan() {
		var cmd command
		if err := json.Unmarshal(scanner.Bytes(), &cmd); err != nil {
			o.emit(map[string]any{"event": "reply", "ok": false, "error": "bad command: " + err.Error()})
			continue
		}
		err := p.run(cmd)
		reply := map[string]any{"event": "reply", "id": cmd.ID, "op": cmd.Op, "ok": err == nil}
		if err != nil {
			reply["error"] = err.Error()
		}
		o.emit(reply)
		if cmd.Op == "quit" {
			break
		}
	}
	p.stop()
}

// quietLogger keeps go-control-plane's own logs off stdout (that is the test's channel).
type quietLogger struct{}

func (quietLogger) Debugf(string, ...any) {}
func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Warnf(f string, a ...any) {
	fmt.Fprintf(os.Stderr, "warn: "+f+"\n", a...)
}
func (quietLogger) Errorf(f string, a ...any) {
	fmt.Fprintf(os.Stderr, "error: "+f+"\n", a...)
}

var _ log.Logger = quietLogger{}

type wireResource struct {
	Value string `json:"value"`
	TTLMs int64  `json:"ttl_ms"`
}

type command struct {
	ID        any                       `json:"id"`
	Op        string                    `json:"op"`
	Node      string                    `json:"node"`
	Version   string                    `json:"version"`
	Versions  map[string]string         `json:"versions"`
	Resources map[string][]wireResource `json:"resources"`
	TypeURL   string                    `json:"type_url"`
	Value     string                    `json:"value"`
	Name      string                    `json:"name"`
}

func decode(typeURL, value string) (types.Resource, error) {
	raw, err := base64.StdEncoding.DecodeString(value)
	if err != nil {
		return nil, err
	}
	msg, err := anypb.UnmarshalNew(&anypb.Any{TypeUrl: typeURL, Value: raw}, proto.UnmarshalOptions{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", typeURL, err)
	}
	return msg, nil
}

func (p *peer) run(cmd command) error {
	switch cmd.Op {
	case "set_snapshot":
		snap := &cache.Snapshot{}
		for typeURL, items := range cmd.Resources {
			index := cache.GetResponseType(typeURL)
			if index == types.UnknownType {
				return fmt.Errorf("unknown type %q", typeURL)
			}
			withTTL := make([]types.ResourceWithTTL, 0, len(items))
			for _, item := range items {
				msg, err := decode(typeURL, item.Value)
				if err != nil {
					return err
				}
				entry := types.ResourceWithTTL{Resource: msg}
				if item.TTLMs > 0 {
					ttl := time.Duration(item.TTLMs) * time.Millisecond
					entry.TTL = &ttl
				}
				withTTL = append(withTTL, entry)
			}
			version := cmd.Version
			if v, ok := cmd.Versions[typeURL]; ok {
				version = v
			}
			snap.Resources[index] = cache.NewResourcesWithTTL(version, withTTL)
		}
		// Types left out are empty at the snapshot's version, as NewSnapshot leaves them.
		for i := range snap.Resources {
			if snap.Resources[i].Items == nil {
				snap.Resources[i] = cache.NewResourcesWithTTL(cmd.Version, nil)
			}
		}
		return p.snapshot.SetSnapshot(p.ctx, cmd.Node, snap)
	case "clear_snapshot":
		p.snapshot.ClearSnapshot(cmd.Node)
		return nil
	case "upsert":
		if p.linear == nil {
			return errors.New("no linear cache (start with -linear TYPE)")
		}
		msg, err := decode(cmd.TypeURL, cmd.Value)
		if err != nil {
			return err
		}
		return p.linear.UpdateResource(cache.GetResourceName(msg), msg)
	case "remove":
		if p.linear == nil {
			return errors.New("no linear cache (start with -linear TYPE)")
		}
		return p.linear.DeleteResource(cmd.Name)
	case "stop":
		p.stop()
		return nil
	case "start":
		return p.start(p.port)
	case "restart":
		p.stop()
		return p.start(p.port)
	case "quit":
		return nil
	}
	return fmt.Errorf("unknown op %q", cmd.Op)
}

func (p *peer) start(port int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.grpc != nil {
		return errors.New("already serving")
	}
	lis, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return err
	}
	p.port = lis.Addr().(*net.TCPAddr).Port
	g := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(g, p.xds)
	clusterservice.RegisterClusterDiscoveryServiceServer(g, p.xds)
	endpointservice.RegisterEndpointDiscoveryServiceServer(g, p.xds)
	listenerservice.RegisterListenerDiscoveryServiceServer(g, p.xds)
	routeservice.RegisterRouteDiscoveryServiceServer(g, p.xds)
	p.grpc = g
	go g.Serve(lis)
	return nil
}

// stop ends every stream at once (no graceful drain), as a crashed control plane would.
func (p *peer) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.grpc != nil {
		p.grpc.Stop()
		p.grpc = nil
	}
}

func (p *peer) callbacks() server.CallbackFuncs {
	return server.CallbackFuncs{
		StreamOpenFunc: func(_ context.Context, id int64, typeURL string) error {
			p.out.emit(map[string]any{"event": "stream_open", "stream": id, "delta": false, "type_url": typeURL})
			return nil
		},
		StreamClosedFunc: func(id int64, _ *core.Node) {
			p.out.emit(map[string]any{"event": "stream_closed", "stream": id, "delta": false})
		},
		DeltaStreamOpenFunc: func(_ context.Context, id int64, typeURL string) error {
			p.out.emit(map[string]any{"event": "stream_open", "stream": id, "delta": true, "type_url": typeURL})
			return nil
		},
		DeltaStreamClosedFunc: func(id int64, _ *core.Node) {
			p.out.emit(map[string]any{"event": "stream_closed", "stream": id, "delta": true})
		},
		// SotW: the server has already copied the stream's first node into a request
		// that came without one, so node_id here cannot tell whether it was on the wire.
		StreamRequestFunc: func(id int64, r *discovery.DiscoveryRequest) error {
			event := map[string]any{
				"event": "request", "stream": id, "delta": false,
				"type_url": r.GetTypeUrl(), "version_info": r.GetVersionInfo(),
				"response_nonce": r.GetResponseNonce(), "resource_names": nonNil(r.GetResourceNames()),
				"node_id": r.GetNode().GetId(), "has_node": r.GetNode() != nil,
			}
			addError(event, r.GetErrorDetail())
			p.out.emit(event)
			return nil
		},
		StreamResponseFunc: func(_ context.Context, id int64, r *discovery.DiscoveryRequest, resp *discovery.DiscoveryResponse) {
			names, heartbeat := sotwNames(resp.GetResources())
			p.out.emit(map[string]any{
				"event": "response", "stream": id, "delta": false,
				"type_url": resp.GetTypeUrl(), "version_info": resp.GetVersionInfo(),
				"nonce": resp.GetNonce(), "resources": names, "heartbeats": heartbeat,
			})
		},
		// Delta: called before the server fills in a missing node, so has_node is the wire's.
		StreamDeltaRequestFunc: func(id int64, r *discovery.DeltaDiscoveryRequest) error {
			event := map[string]any{
				"event": "request", "stream": id, "delta": true,
				"type_url": r.GetTypeUrl(), "response_nonce": r.GetResponseNonce(),
				"subscribe":                 nonNil(r.GetResourceNamesSubscribe()),
				"unsubscribe":               nonNil(r.GetResourceNamesUnsubscribe()),
				"initial_resource_versions": nonNilMap(r.GetInitialResourceVersions()),
				"node_id":                   r.GetNode().GetId(), "has_node": r.GetNode() != nil,
			}
			addError(event, r.GetErrorDetail())
			p.out.emit(event)
			return nil
		},
		StreamDeltaResponseFunc: func(id int64, _ *discovery.DeltaDiscoveryRequest, resp *discovery.DeltaDiscoveryResponse) {
			names := make([]string, 0, len(resp.GetResources()))
			versions := make(map[string]string, len(resp.GetResources()))
			for _, r := range resp.GetResources() {
				names = append(names, r.GetName())
				versions[r.GetName()] = r.GetVersion()
			}
			sort.Strings(names)
			p.out.emit(map[string]any{
				"event": "response", "stream": id, "delta": true,
				"type_url": resp.GetTypeUrl(), "system_version_info": resp.GetSystemVersionInfo(),
				"nonce": resp.GetNonce(), "resources": names, "versions": versions,
				"removed": nonNil(resp.GetRemovedResources()),
			})
		},
	}
}

func addError(event map[string]any, detail interface {
	GetCode() int32
	GetMessage() string
}) {
	if detail != nil && (detail.GetCode() != 0 || detail.GetMessage() != "") {
		event["error_detail"] = map[string]any{"code": detail.GetCode(), "message": detail.GetMessage()}
	}
}

// sotwNames reads the names in a SotW response; a Resource wrapper without a body is a heartbeat.
func sotwNames(items []*anypb.Any) (names, heartbeats []string) {
	names, heartbeats = []string{}, []string{}
	wrapper := "type.googleapis.com/" + string(proto.MessageName(&discovery.Resource{}))
	for _, item := range items {
		if item.GetTypeUrl() == wrapper {
			var wrapped discovery.Resource
			if err := proto.Unmarshal(item.GetValue(), &wrapped); err == nil {
				if wrapped.GetResource() == nil {
					heartbeats = append(heartbeats, wrapped.GetName())
				} else {
					names = append(names, wrapped.GetName())
				}
				continue
			}
		}
		msg, err := item.UnmarshalNew()
		if err != nil {
			names = append(names, "?"+err.Error())
			continue
		}
		names = append(names, cache.GetResourceName(msg))
	}
	sort.Strings(names)
	sort.Strings(heartbeats)
	return names, heartbeats
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func nonNilMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
