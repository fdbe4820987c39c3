package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/policyrouter/policyrouter/routing"
)

// SchemaVersion is the layout of the bbolt file this build reads and
// writes. It is stored in the meta bucket when a file is created; a file
// with another version is refused with ErrSchemaVersion. Bump it on any
// change a previous build could misread.
const SchemaVersion = 1

// BoltFileName is the name of the database file inside the data directory.
const BoltFileName = "policyrouter.db"

// DefaultLockTimeout is how long OpenBolt waits for the file lock when
// BoltOptions.LockTimeout is zero.
const DefaultLockTimeout = time.Second

// ErrSchemaVersion is returned (wrapped, with both versions and the file
// named) by OpenBolt for a file written with another schema version.
var ErrSchemaVersion = errors.New("schema version mismatch")

// Bucket and key names. Policies are keyed by id; the topology is one
// key holding JSON.
var (
	bucketMeta        = []byte("meta")
	bucketPolicies    = []byte("policies")
	bucketTopology    = []byte("topology")
	keySchemaVersion  = []byte("schema_version")
	keyTopology       = []byte("topology")
	keyWeights        = []byte("weights")  // in bucketMeta
	keyRevision       = []byte("revision") // in bucketMeta
	keyUpdatePrefix   = []byte("update/")  // in bucketMeta: one key per rolling update
	schemaVersionText = []byte(strconv.Itoa(SchemaVersion))
)

// BoltOptions configures OpenBolt. The zero value is ready to use.
type BoltOptions struct {
	// LockTimeout bounds the wait for the database file's exclusive lock,
	// which another process holding the same data directory keeps. Zero
	// (or negative) means DefaultLockTimeout.
	LockTimeout time.Duration
}

// Bolt is a durable Store on an embedded bbolt database: one file,
// <dir>/policyrouter.db, locked against other processes while open.
//
// Every write happens inside one fsync'd bbolt transaction, so a method
// returning nil means the change survives a crash, and a failed or
// interrupted write leaves nothing of itself behind. Each Apply is a
// transaction of its own: it checks the revision it was given, so it could
// not share a batch with others, and the registry serialises its writes
// anyway. Bolt is safe for concurrent use.
type Bolt struct {
	notifier

	db   *bolt.DB
	path string
}

var _ Store = (*Bolt)(nil)

// OpenBolt opens, or creates, the database in dir (created with mode 0700
// if missing). It fails if another process holds the file (after
// opts.LockTimeout), if the file is not a bbolt database, if it is a bbolt
// database without this package's layout, or if its schema version is not
// SchemaVersion (ErrSchemaVersion).
func OpenBolt(dir string, opts BoltOptions) (*Bolt, error) {
	if dir == "" {
		return nil, errors.New("store: open bolt: empty data directory")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("store: open bolt: create data directory: %w", err)
	}
	path := filepath.Join(dir, BoltFileName)
	timeout := opts.LockTimeout
	if timeout <= 0 {
		timeout = DefaultLockTimeout
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: timeout})
	if err != nil {
		switch {
		case errors.Is(err, bolterrors.ErrTimeout):
			return nil, fmt.Errorf("store: open %s: another policyrouter process appears to hold %s (file lock not acquired within %s): %w",
				path, path, timeout, err)
		case errors.As(err, new(*fs.PathError)), errors.As(err, new(syscall.Errno)):
			// The operating system refused: permissions, a directory
			// in the way, and so on.
			return nil, fmt.Errorf("store: open %s: %w", path, err)
		}
		// Everything else comes from reading the file's contents
		// (bbolt's ErrInvalid, ErrChecksum, ErrVersionMismatch, "file
		// size too small", ...).
		return nil, fmt.Errorf("store: open %s: not a bbolt database, or a corrupt one: %w", path, err)
	}
	if err := initSchema(db, path); err != nil {
		_ = db.Close()
		return nil, err
	}
	return &Bolt{db: db, path: path}, nil
}

// initSchema checks the file's schema version and, for a new (empty)
// file, writes it and creates the buckets.
func initSchema(db *bolt.DB, path string) error {
	var fresh bool
	err := db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			var names []string
			_ = tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
				names = append(names, string(name))
				return nil
			})
			if len(names) > 0 {
				return fmt.Errorf("store: open %s: not a policyrouter database (no meta bucket; buckets %s)",
					path, strings.Join(names, ", "))
			}
			fresh = true
			return nil
		}
		v := meta.Get(keySchemaVersion)
		if v == nil {
			return fmt.Errorf("store: open %s: %w: file has no schema version, this build uses version %d",
				path, ErrSchemaVersion, SchemaVersion)
		}
		if !bytes.Equal(v, schemaVersionText) {
			return fmt.Errorf("store: open %s: %w: file has version %q, this build uses version %d",
				path, ErrSchemaVersion, v, SchemaVersion)
		}
		for _, name := range [][]byte{bucketPolicies, bucketTopology} {
			if tx.Bucket(name) == nil {
				return fmt.Errorf("store: open %s: corrupt: bucket %q missing", path, name)
			}
		}
		return nil
	})
	if err != nil || !fresh {
		return err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		if err := meta.Put(keySchemaVersion, schemaVersionText); err != nil {
			return err
		}
		for _, name := range [][]byte{bucketPolicies, bucketTopology} {
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: open %s: initialise: %w", path, err)
	}
	return nil
}

// Path returns the database file's path.
func (b *Bolt) Path() string { return b.path }

// Load implements Store. It reads everything in one read transaction, so
// the result is a consistent snapshot.
func (b *Bolt) Load(ctx context.Context) (Registration, error) {
	if err := ctx.Err(); err != nil {
		return Registration{}, fmt.Errorf("store: load: %w", err)
	}
	var reg Registration
	err := b.db.View(func(tx *bolt.Tx) error {
		err := tx.Bucket(bucketPolicies).ForEach(func(k, v []byte) error {
			var rec policyRecord
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("policy %q: %w", k, err)
			}
			reg.Policies = append(reg.Policies, rec.policy())
			return nil
		})
		if err != nil {
			return err
		}
		if v := tx.Bucket(bucketTopology).Get(keyTopology); v != nil {
			if err := json.Unmarshal(v, &reg.Topology); err != nil {
				return fmt.Errorf("topology: %w", err)
			}
		}
		if v := tx.Bucket(bucketMeta).Get(keyWeights); v != nil {
			if err := json.Unmarshal(v, &reg.Weights); err != nil {
				return fmt.Errorf("weights: %w", err)
			}
		}
		if reg.Revision, err = readRevision(tx.Bucket(bucketMeta)); err != nil {
			return err
		}
		reg.Updates = make(map[string][]byte)
		c := tx.Bucket(bucketMeta).Cursor()
		for k, v := c.Seek(keyUpdatePrefix); k != nil && bytes.HasPrefix(k, keyUpdatePrefix); k, v = c.Next() {
			reg.Updates[string(k[len(keyUpdatePrefix):])] = bytes.Clone(v)
		}
		return nil
	})
	if err != nil {
		return Registration{}, fmt.Errorf("store: load: %w", err)
	}
	if reg.Policies == nil {
		reg.Policies = []routing.Policy{}
	}
	sortPolicies(reg.Policies)
	return reg, nil
}

// Apply implements Store: one fsync'd transaction, which checks and
// bumps the revision kept in the meta bucket.
func (b *Bolt) Apply(ctx context.Context, ifRevision int64, c Change) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("store: apply: %w", err)
	}
	puts, err := encodePolicies(c.Put)
	if err != nil {
		return 0, fmt.Errorf("store: apply: %w", err)
	}
	var topo, weights []byte
	if c.Topology != nil {
		if topo, err = json.Marshal(*c.Topology); err != nil {
			return 0, fmt.Errorf("store: apply: topology: %w", err)
		}
	}
	if c.Weights != nil {
		if weights, err = json.Marshal(*c.Weights); err != nil {
			return 0, fmt.Errorf("store: apply: weights: %w", err)
		}
	}
	var rev int64
	err = b.db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		cur, err := readRevision(meta)
		if err != nil {
			return err
		}
		if ifRevision != AnyRevision && ifRevision != cur {
			return ErrStale
		}
		bk := tx.Bucket(bucketPolicies)
		if c.ReplacePolicies {
			if err := tx.DeleteBucket(bucketPolicies); err != nil {
				return err
			}
			if bk, err = tx.CreateBucket(bucketPolicies); err != nil {
				return err
			}
			bk.FillPercent = 0.9
		}
		for _, id := range c.Delete {
			if bk.Get([]byte(id)) == nil {
				return fmt.Errorf("delete policy %q: %w", id, ErrNotFound)
			}
			if err := bk.Delete([]byte(id)); err != nil {
				return err
			}
		}
		for _, e := range puts {
			if err := bk.Put(e.key, e.val); err != nil {
				return fmt.Errorf("policy %q: %w", e.key, err)
			}
		}
		if topo != nil {
			if err := tx.Bucket(bucketTopology).Put(keyTopology, topo); err != nil {
				return err
			}
		}
		if weights != nil {
			if err := meta.Put(keyWeights, weights); err != nil {
				return err
			}
		}
		rev = cur + 1
		return meta.Put(keyRevision, strconv.AppendInt(nil, rev, 10))
	})
	if err != nil {
		return 0, fmt.Errorf("store: apply: %w", err)
	}
	b.notify()
	return rev, nil
}

// readRevision returns the revision kept in the meta bucket: 0 in a file
// never written (or written by a build before revisions).
func readRevision(meta *bolt.Bucket) (int64, error) {
	v := meta.Get(keyRevision)
	if v == nil {
		return 0, nil
	}
	rev, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("corrupt revision %q: %w", v, err)
	}
	return rev, nil
}

// PutUpdate implements Store: one key of the meta bucket per update.
func (b *Bolt) PutUpdate(ctx context.Context, id string, doc []byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store: put update: %w", err)
	}
	key := append(bytes.Clone(keyUpdatePrefix), id...)
	if err := b.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(key, doc) }); err != nil {
		return fmt.Errorf("store: put update %q: %w", id, err)
	}
	b.notify()
	return nil
}

// Watch implements Store: this process is the file's only writer.
func (b *Bolt) Watch(ctx context.Context) <-chan struct{} { return b.watch(ctx) }

type keyValue struct{ key, val []byte }

// encodePolicies returns ps's keys and stored values, sorted by key (so
// that bbolt's inserts are appends). The sort is stable so that, as in
// Registration.Apply, the last of duplicate ids wins.
func encodePolicies(ps []routing.Policy) ([]keyValue, error) {
	kvs := make([]keyValue, 0, len(ps))
	for _, p := range ps {
		key, val, err := encodePolicy(p)
		if err != nil {
			return nil, fmt.Errorf("policy %q: %w", p.ID, err)
		}
		kvs = append(kvs, keyValue{key, val})
	}
	slices.SortStableFunc(kvs, func(a, b keyValue) int { return bytes.Compare(a.key, b.key) })
	return kvs, nil
}

// Close implements Store: it waits for running transactions, then
// releases the file and its lock. Calls after Close fail.
func (b *Bolt) Close() error {
	if err := b.db.Close(); err != nil {
		return fmt.Errorf("store: close %s: %w", b.path, err)
	}
	return nil
}

// policyRecord is how a policy is stored: routing.Policy with the field
// names of the stored JSON, which are part of the on-disk format.
type policyRecord struct {
	Index    int               `json:"index"`
	ID       string            `json:"id"`
	URL      string            `json:"url"`
	NodeID   string            `json:"node_id,omitempty"`
	Capacity int               `json:"capacity"`
	Labels   map[string]string `json:"labels,omitempty"`
	Draining bool              `json:"draining,omitempty"`
	// SleepMarked is routing.Policy.SleepMarked.
	SleepMarked bool `json:"sleep_marked,omitempty"`
	// PauseMarked is routing.Policy.PauseMarked.
	PauseMarked bool     `json:"pause_marked,omitempty"`
	Version     int64    `json:"version,omitempty"`
	Engine      string   `json:"engine,omitempty"`
	Models      []string `json:"models,omitempty"`
	// The policy's credentials are stored as they were given (the store
	// is the operator's; keep --data-dir and etcd private): the router
	// needs them back after a restart to call the policy. They are plain
	// strings here because routing.Secret marshals as "[redacted]".
	APIKey      string `json:"api_key,omitempty"`
	AdminAPIKey string `json:"admin_api_key,omitempty"`
}

// recordOf returns how p is stored.
func recordOf(p routing.Policy) policyRecord {
	return policyRecord{Index: p.Index, ID: p.ID, URL: p.URL, NodeID: p.NodeID, Capacity: p.Capacity, Labels: p.Labels,
		Draining: p.Draining, SleepMarked: p.SleepMarked, PauseMarked: p.PauseMarked, Version: p.Version, Engine: p.Engine, Models: p.Models, APIKey: p.APIKey.Reveal(), AdminAPIKey: p.AdminAPIKey.Reveal()}
}

// policy returns the stored policy.
func (r policyRecord) policy() routing.Policy {
	return routing.Policy{Index: r.Index, ID: r.ID, URL: r.URL, NodeID: r.NodeID, Capacity: r.Capacity, Labels: r.Labels,
		Draining: r.Draining, SleepMarked: r.SleepMarked, PauseMarked: r.PauseMarked, Version: r.Version, Engine: r.Engine, Models: r.Models, APIKey: routing.Secret(r.APIKey), AdminAPIKey: routing.Secret(r.AdminAPIKey)}
}

// encodePolicy returns p's key and stored value.
func encodePolicy(p routing.Policy) (key, val []byte, err error) {
	if p.ID == "" {
		return nil, nil, errors.New("empty id")
	}
	val, err = json.Marshal(recordOf(p))
	if err != nil {
		return nil, nil, err
	}
	return []byte(p.ID), val, nil
}
