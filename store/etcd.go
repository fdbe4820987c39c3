package store

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/policyrouter/policyrouter/routing"
)

// DefaultEtcdPrefix is the key prefix of EtcdOptions.Prefix when empty.
const DefaultEtcdPrefix = "/policyrouter/"

// EtcdOptions configures OpenEtcd.
type EtcdOptions struct {
	// Endpoints are the etcd members' client URLs.
	Endpoints []string
	// Prefix is prepended to every key; default DefaultEtcdPrefix. Routers
	// sharing a prefix share a registration (and elect one leader).
	Prefix string
	// TLS, when set, is used towards etcd (https:// endpoints; a client
	// certificate for a cluster that requires one).
	TLS *tls.Config
	// DialTimeout bounds the first connection. Default 5 seconds.
	DialTimeout time.Duration
	// RequestTimeout bounds each call of a context without a deadline.
	// Default 5 seconds.
	RequestTimeout time.Duration
	// Logger logs a lost watch. Default slog.Default().
	Logger *slog.Logger
}

// Etcd is a Store in etcd, shared by every router replica on the same
// prefix. The registration (policies, topology, weights) is one key,
// <prefix>registration, holding JSON, so that every change of it is one
// compare-and-swap on that key's revision; its ModRevision is
// Registration.Revision. Each rolling update's document is one key,
// <prefix>updates/<id>. Leader election uses <prefix>leader.
//
// One key keeps Apply atomic at any fleet size without etcd's limit on
// operations per transaction; it is bounded instead by etcd's request size
// (--max-request-bytes, 1.5 MiB by default: about 10,000 policies).
type Etcd struct {
	cli     *clientv3.Client
	prefix  string
	logger  *slog.Logger
	timeout time.Duration // of calls without a deadline
	fence   atomic.Pointer[fence]
}

// fence is a key that must still exist, created at rev, for an update
// document to be written: the writer's election key.
type fence struct {
	key string
	rev int64
}

// ErrFenced is returned by PutUpdate when the fence set by Fence no longer
// holds: the writer is no longer the leader.
var ErrFenced = errors.New("this replica no longer leads: the write was fenced off")

var _ Store = (*Etcd)(nil)

// OpenEtcd connects to etcd and checks that it answers.
func OpenEtcd(ctx context.Context, opts EtcdOptions) (*Etcd, error) {
	if len(opts.Endpoints) == 0 {
		return nil, errors.New("store: open etcd: no endpoints")
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultEtcdPrefix
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 5 * time.Second
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   opts.Endpoints,
		DialTimeout: opts.DialTimeout,
		TLS:         opts.TLS,
		Context:     context.WithoutCancel(ctx),
		// The client's own zap logs would interleave a second format with
		// the router's log; its errors reach us through the calls.
		Logger: zap.NewNop(),
		// gRPC's default reconnect backoff grows to 120 s: after an etcd
		// restart the router would stay cut off for seconds after etcd is
		// back. Reconnect attempts here are at most a second apart.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: opts.DialTimeout,
		})},
	})
	if err != nil {
		return nil, fmt.Errorf("store: open etcd %s: %w", strings.Join(opts.Endpoints, ","), err)
	}
	e := &Etcd{cli: cli, prefix: opts.Prefix, logger: opts.Logger, timeout: opts.RequestTimeout}
	cctx, cancel := context.WithTimeout(ctx, opts.DialTimeout)
	defer cancel()
	if _, err := cli.Get(cctx, e.keyRegistration(), clientv3.WithCountOnly()); err != nil {
		_ = cli.Close()
		return nil, fmt.Errorf("store: open etcd %s: no answer within %s: %w", strings.Join(opts.Endpoints, ","), opts.DialTimeout, err)
	}
	return e, nil
}

// Client returns the etcd client, for leader election on the same
// connection.
func (e *Etcd) Client() *clientv3.Client { return e.cli }

// Ping reads one key's count: nil when etcd answers within the request
// timeout (or ctx's deadline), else why not.
func (e *Etcd) Ping(ctx context.Context) error {
	ctx, cancel := e.call(ctx)
	defer cancel()
	if _, err := e.cli.Get(ctx, e.keyRegistration(), clientv3.WithCountOnly()); err != nil {
		return failed(ctx, "ping", err)
	}
	return nil
}

// Prefix returns the key prefix.
func (e *Etcd) Prefix() string { return e.prefix }

// call bounds a call of ctx by the request timeout when ctx has no
// deadline: the etcd client otherwise retries an unreachable cluster for as
// long as ctx lasts.
func (e *Etcd) call(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, e.timeout)
}

// failed wraps the error of an etcd call of op: ErrUnavailable unless the
// caller gave up (ctx is done) or the request itself was refused.
func failed(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil || errors.Is(err, rpctypes.ErrRequestTooLarge) {
		return fmt.Errorf("store: %s: %w", op, err)
	}
	return fmt.Errorf("store: %s: %w: %w", op, ErrUnavailable, err)
}

func (e *Etcd) keyRegistration() string { return e.prefix + "registration" }
func (e *Etcd) keyUpdates() string      { return e.prefix + "updates/" }

// registrationRecord is the stored JSON of the registration key.
type registrationRecord struct {
	Policies []policyRecord   `json:"policies"`
	Topology routing.Topology `json:"topology"`
	Weights  Weights          `json:"weights"`
}

func encodeRegistration(reg Registration) ([]byte, error) {
	rec := registrationRecord{Policies: make([]policyRecord, len(reg.Policies)), Topology: reg.Topology, Weights: reg.Weights}
	for i, p := range reg.Policies {
		if p.ID == "" {
			return nil, fmt.Errorf("policy %d: empty id", p.Index)
		}
		rec.Policies[i] = recordOf(p)
	}
	return json.Marshal(rec)
}

func decodeRegistration(val []byte) (Registration, error) {
	var rec registrationRecord
	if err := json.Unmarshal(val, &rec); err != nil {
		return Registration{}, err
	}
	reg := Registration{Policies: make([]routing.Policy, len(rec.Policies)), Topology: rec.Topology, Weights: rec.Weights}
	for i, p := range rec.Policies {
		reg.Policies[i] = p.policy()
	}
	sortPolicies(reg.Policies)
	return reg, nil
}

// Load implements Store: one read of the prefix, a consistent snapshot.
func (e *Etcd) Load(ctx context.Context) (Registration, error) {
	cctx, cancel := e.call(ctx)
	defer cancel()
	resp, err := e.cli.Get(cctx, e.prefix, clientv3.WithPrefix())
	if err != nil {
		return Registration{}, failed(ctx, "load", err)
	}
	reg := Registration{Policies: []routing.Policy{}, Updates: make(map[string][]byte)}
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		switch {
		case key == e.keyRegistration():
			stored, err := decodeRegistration(kv.Value)
			if err != nil {
				return Registration{}, fmt.Errorf("store: load: %s: %w", key, err)
			}
			stored.Updates, stored.Revision = reg.Updates, kv.ModRevision
			reg = stored
		case strings.HasPrefix(key, e.keyUpdates()):
			reg.Updates[strings.TrimPrefix(key, e.keyUpdates())] = kv.Value
		}
	}
	return reg, nil
}

// Apply implements Store: read the registration key, change it, and write
// it back in a transaction that compares its revision with the one read.
// An unconditional Apply that loses the race reads again and retries.
func (e *Etcd) Apply(ctx context.Context, ifRevision int64, c Change) (int64, error) {
	key := e.keyRegistration()
	cctx, cancel := e.call(ctx)
	defer cancel()
	for {
		resp, err := e.cli.Get(cctx, key)
		if err != nil {
			return 0, failed(ctx, "apply: read", err)
		}
		var cur Registration
		var rev int64
		if len(resp.Kvs) > 0 {
			if cur, err = decodeRegistration(resp.Kvs[0].Value); err != nil {
				return 0, fmt.Errorf("store: apply: %s: %w", key, err)
			}
			rev = resp.Kvs[0].ModRevision
		}
		if ifRevision != AnyRevision && ifRevision != rev {
			return 0, ErrStale
		}
		next, err := cur.Apply(c)
		if err != nil {
			return 0, err
		}
		val, err := encodeRegistration(next)
		if err != nil {
			return 0, fmt.Errorf("store: apply: %w", err)
		}
		txn, err := e.cli.Txn(cctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpPut(key, string(val))).
			Commit()
		if errors.Is(err, rpctypes.ErrRequestTooLarge) {
			return 0, fmt.Errorf("store: apply: the registration (%d bytes) is larger than etcd accepts (--max-request-bytes): %w", len(val), err)
		}
		if err != nil {
			return 0, failed(ctx, "apply", err)
		}
		if txn.Succeeded {
			return txn.Header.Revision, nil
		}
		if ifRevision != AnyRevision {
			return 0, ErrStale
		}
	}
}

// Fence makes every later PutUpdate conditional on key still existing with
// create revision rev: the leader's election key (concurrency.Election's
// Key and Rev). Only the leader runs rolling updates; fenced, a replica
// that lost its leadership cannot overwrite what its successor writes.
func (e *Etcd) Fence(key string, rev int64) { e.fence.Store(&fence{key: key, rev: rev}) }

// PutUpdate implements Store; ErrFenced when the fence no longer holds.
func (e *Etcd) PutUpdate(ctx context.Context, id string, doc []byte) error {
	put := clientv3.OpPut(e.keyUpdates()+id, string(doc))
	cctx, cancel := e.call(ctx)
	defer cancel()
	f := e.fence.Load()
	if f == nil {
		if _, err := e.cli.Do(cctx, put); err != nil {
			return failed(ctx, "put update "+id, err)
		}
		return nil
	}
	resp, err := e.cli.Txn(cctx).If(clientv3.Compare(clientv3.CreateRevision(f.key), "=", f.rev)).Then(put).Commit()
	if err != nil {
		return failed(ctx, "put update "+id, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("store: put update %q: %w", id, ErrFenced)
	}
	return nil
}

// Watch implements Store with an etcd watch of the prefix. The first
// notification comes once the watch stands, so a Load made after it sees
// every later change. A watch that ends (its member lost the cluster's
// leader, the connection broke) is started again after a pause from the
// revision after the last one seen, so no change falls between the two;
// if that revision was compacted meanwhile, it starts from the present,
// with one notification for whatever was missed.
func (e *Etcd) Watch(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{}, 1)
	go func() {
		var seen int64 // the last revision this watch has reported
		for ctx.Err() == nil {
			opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCreatedNotify()}
			if seen > 0 {
				opts = append(opts, clientv3.WithRev(seen+1))
			}
			wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
			for resp := range e.cli.Watch(wctx, e.prefix, opts...) {
				if resp.CompactRevision != 0 {
					e.logger.Warn("etcd watch fell behind a compaction; reloading", "prefix", e.prefix, "compacted", resp.CompactRevision)
					seen = 0
					wake(ch)
					break
				}
				if err := resp.Err(); err != nil {
					e.logger.Warn("etcd watch lost; watching again", "prefix", e.prefix, "err", err)
					break
				}
				if resp.Header.Revision > seen {
					seen = resp.Header.Revision
				}
				wake(ch) // the created notice, or changes
			}
			cancel()
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return ch
}

// Close implements Store.
func (e *Etcd) Close() error { return e.cli.Close() }
