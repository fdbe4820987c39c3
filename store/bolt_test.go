package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/policyrouter/policyrouter/routing"
)

func TestBoltReopenKeepsEverything(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := OpenBolt(dir, BoltOptions{})
	if err != nil {
		t.Fatalf("OpenBolt: %v", err)
	}
	if err := replacePolicies(ctx, s, []routing.Policy{testPolicy(0), testPolicy(1), testPolicy(2)}); err != nil {
		t.Fatalf("ReplacePolicies: %v", err)
	}
	changed := testPolicy(1)
	changed.Draining = !changed.Draining
	changed.SleepMarked = !changed.SleepMarked
	mustPut(t, s, changed, testPolicy(3))
	if err := deletePolicy(ctx, s, testPolicy(0).ID); err != nil {
		t.Fatalf("DeletePolicy: %v", err)
	}
	topo := routing.Topology{"node-a": {"env": {0, 1}, "eval": {0}}, "node-b": {"env": {}, "eval": nil}}
	if err := putTopology(ctx, s, topo); err != nil {
		t.Fatalf("PutTopology: %v", err)
	}
	want := mustLoad(t, s)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	s = openBolt(t, dir)
	got := mustLoad(t, s)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("after reopen:\n got %+v\nwant %+v", got, want)
	}
	if wantPs := []routing.Policy{changed, testPolicy(2), testPolicy(3)}; !reflect.DeepEqual(got.Policies, wantPs) {
		t.Errorf("after reopen, policies:\n got %+v\nwant %+v", got.Policies, wantPs)
	}
}

func TestBoltCreatesDirAndFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "data")
	s := openBolt(t, dir)
	info, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Mode().Perm(); got != 0o700 {
		t.Errorf("data dir mode = %v, want 0700", got)
	}
	if got, want := s.Path(), filepath.Join(dir, BoltFileName); got != want {
		t.Errorf("Path() = %q, want %q", got, want)
	}
	info, err = os.Stat(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Mode().Perm(); got != 0o600 {
		t.Errorf("file mode = %v, want 0600", got)
	}
}

func TestBoltClosed(t *testing.T) {
	s, err := OpenBolt(t.TempDir(), BoltOptions{})
	if err != nil {
		t.Fatalf("OpenBolt: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	ctx := context.Background()
	if err := putPolicy(ctx, s, testPolicy(0)); err == nil {
		t.Error("PutPolicy after Close succeeded")
	}
	if _, err := s.Load(ctx); err == nil {
		t.Error("Load after Close succeeded")
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestBoltEmptyID(t *testing.T) {
	ctx := context.Background()
	s := openBolt(t, t.TempDir())
	mustPut(t, s, testPolicy(0))
	if err := putPolicy(ctx, s, routing.Policy{URL: "http://x"}); err == nil {
		t.Error("PutPolicy with an empty id succeeded")
	}
	if err := replacePolicies(ctx, s, []routing.Policy{testPolicy(1), {URL: "http://x"}}); err == nil {
		t.Error("ReplacePolicies with an empty id succeeded")
	}
	wantPolicies(t, s, []routing.Policy{testPolicy(0)})
}

// rewriteMeta edits the meta bucket of the closed store in dir with
// bbolt directly.
func rewriteMeta(t *testing.T, dir string, edit func(meta *bolt.Bucket) error) {
	t.Helper()
	db, err := bolt.Open(filepath.Join(dir, BoltFileName), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatalf("bolt.Open: %v", err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error { return edit(tx.Bucket(bucketMeta)) }); err != nil {
		t.Fatalf("edit meta: %v", err)
	}
}

func TestBoltSchemaVersion(t *testing.T) {
	tests := []struct {
		name     string
		edit     func(meta *bolt.Bucket) error
		wantText []string
	}{
		{
			name:     "newer",
			edit:     func(meta *bolt.Bucket) error { return meta.Put(keySchemaVersion, []byte("2")) },
			wantText: []string{`file has version "2"`, fmt.Sprintf("this build uses version %d", SchemaVersion)},
		},
		{
			name:     "unreadable",
			edit:     func(meta *bolt.Bucket) error { return meta.Put(keySchemaVersion, []byte("v1-beta")) },
			wantText: []string{`file has version "v1-beta"`},
		},
		{
			name:     "missing",
			edit:     func(meta *bolt.Bucket) error { return meta.Delete(keySchemaVersion) },
			wantText: []string{"no schema version"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := OpenBolt(dir, BoltOptions{})
			if err != nil {
				t.Fatalf("OpenBolt: %v", err)
			}
			mustPut(t, s, testPolicy(0))
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			rewriteMeta(t, dir, tc.edit)

			s, err = OpenBolt(dir, BoltOptions{})
			if err == nil {
				_ = s.Close()
				t.Fatal("OpenBolt succeeded on a file with another schema version")
			}
			if !errors.Is(err, ErrSchemaVersion) {
				t.Errorf("OpenBolt error = %v, want ErrSchemaVersion", err)
			}
			for _, want := range append(tc.wantText, filepath.Join(dir, BoltFileName)) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("OpenBolt error %q does not mention %q", err, want)
				}
			}
			t.Logf("error: %v", err)
		})
	}
}

func TestBoltSecondOpenFailsWithinLockTimeout(t *testing.T) {
	for _, timeout := range []time.Duration{0, 200 * time.Millisecond} {
		t.Run(fmt.Sprintf("timeout=%s", timeout), func(t *testing.T) {
			dir := t.TempDir()
			first := openBolt(t, dir)
			mustPut(t, first, testPolicy(0))

			want := timeout
			if want == 0 {
				want = DefaultLockTimeout
			}
			start := time.Now()
			second, err := OpenBolt(dir, BoltOptions{LockTimeout: timeout})
			elapsed := time.Since(start)
			if err == nil {
				_ = second.Close()
				t.Fatal("second OpenBolt of the same directory succeeded")
			}
			if !errors.Is(err, bolterrors.ErrTimeout) {
				t.Errorf("error = %v, want bbolt's ErrTimeout wrapped", err)
			}
			msg := fmt.Sprintf("another policyrouter process appears to hold %s", first.Path())
			if !strings.Contains(err.Error(), msg) {
				t.Errorf("error %q does not contain %q", err, msg)
			}
			if elapsed < want/2 || elapsed > want+time.Second {
				t.Errorf("second open failed after %s, want about %s", elapsed, want)
			}
			t.Logf("failed after %s: %v", elapsed.Round(time.Millisecond), err)

			// The lock is the only obstacle: once released, it opens.
			if err := first.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			second = openBolt(t, dir)
			wantPolicies(t, second, []routing.Policy{testPolicy(0)})
		})
	}
}

func TestBoltRefusesOtherFiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	tests := []struct {
		name     string
		contents []byte
		wantText string
	}{
		{"text", []byte("policies:\n  - url: http://x\n"), "not a bbolt database"},
		{"random page", random(4096), "not a bbolt database"},
		{"random 64KiB", random(64 << 10), "not a bbolt database"},
		{"zeros 16KiB", make([]byte, 16<<10), "not a bbolt database"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, BoltFileName)
			if err := os.WriteFile(path, tc.contents, 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := OpenBolt(dir, BoltOptions{})
			if err == nil {
				_ = s.Close()
				t.Fatal("OpenBolt succeeded on a file that is not a database")
			}
			for _, want := range []string{tc.wantText, path} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
			got, rerr := os.ReadFile(path)
			if rerr != nil || !bytes.Equal(got, tc.contents) {
				t.Errorf("OpenBolt changed the file it refused")
			}
			t.Logf("error: %v", err)
		})
	}

	t.Run("a directory in the way", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, BoltFileName)
		if err := os.Mkdir(path, 0o700); err != nil {
			t.Fatal(err)
		}
		s, err := OpenBolt(dir, BoltOptions{})
		if err == nil {
			_ = s.Close()
			t.Fatal("OpenBolt succeeded with a directory for its file")
		}
		// An operating system error is passed on as such, not blamed
		// on the file's contents.
		if !errors.As(err, new(*os.PathError)) || strings.Contains(err.Error(), "not a bbolt database") {
			t.Errorf("error = %v, want the *os.PathError alone", err)
		}
	})

	t.Run("foreign bbolt database", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, BoltFileName)
		db, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = db.Update(func(tx *bolt.Tx) error {
			_, err := tx.CreateBucket([]byte("someone-elses"))
			return err
		})
		if cerr := db.Close(); err != nil || cerr != nil {
			t.Fatal(err, cerr)
		}
		s, err := OpenBolt(dir, BoltOptions{})
		if err == nil {
			_ = s.Close()
			t.Fatal("OpenBolt succeeded on another program's bbolt file")
		}
		for _, want := range []string{"not a policyrouter database", "someone-elses", path} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not mention %q", err, want)
			}
		}
	})
}

// TestBoltConcurrentPutsAreDurable has many goroutines write at once,
// some of them failing (deleting unknown ids, which makes bbolt rerun the
// rest of a batch), and checks every acknowledged write after a reopen.
func TestBoltConcurrentPutsAreDurable(t *testing.T) {
	const writers, failing = 200, 20
	ctx := context.Background()
	dir := t.TempDir()
	s, err := OpenBolt(dir, BoltOptions{})
	if err != nil {
		t.Fatalf("OpenBolt: %v", err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers+failing)
	start := time.Now()
	for i := range writers {
		wg.Go(func() {
			if err := putPolicy(ctx, s, testPolicy(i)); err != nil {
				errs <- err
			}
		})
	}
	for i := range failing {
		wg.Go(func() {
			if err := deletePolicy(ctx, s, fmt.Sprintf("unknown-%d", i)); !errors.Is(err, ErrNotFound) {
				errs <- fmt.Errorf("DeletePolicy(unknown) = %v, want ErrNotFound", err)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d concurrent PutPolicy (+%d failing deletes): %s, %.0f puts/s",
		writers, failing, elapsed.Round(time.Microsecond), writers/elapsed.Seconds())
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	s = openBolt(t, dir)
	want := make([]routing.Policy, writers)
	for i := range want {
		want[i] = testPolicy(i)
	}
	wantPolicies(t, s, want)
}

// storeN writes n policies into a new store in dir and closes it.
func storeN(tb testing.TB, dir string, n int) {
	tb.Helper()
	s, err := OpenBolt(dir, BoltOptions{})
	if err != nil {
		tb.Fatalf("OpenBolt: %v", err)
	}
	ps := make([]routing.Policy, n)
	for i := range ps {
		ps[i] = testPolicy(i)
	}
	if err := replacePolicies(context.Background(), s, ps); err != nil {
		tb.Fatalf("ReplacePolicies: %v", err)
	}
	if err := s.Close(); err != nil {
		tb.Fatalf("Close: %v", err)
	}
}

// TestBoltRestore10000 times what a restart costs: OpenBolt and Load of
// 10,000 policies.
func TestBoltRestore10000(t *testing.T) {
	const n = 10000
	dir := t.TempDir()
	storeN(t, dir, n)

	start := time.Now()
	s, err := OpenBolt(dir, BoltOptions{})
	if err != nil {
		t.Fatalf("OpenBolt: %v", err)
	}
	defer s.Close()
	reg, err := s.Load(context.Background())
	elapsed := time.Since(start)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(reg.Policies) != n {
		t.Fatalf("Load returned %d policies, want %d", len(reg.Policies), n)
	}
	for i, p := range reg.Policies {
		if p.Index != i {
			t.Fatalf("Policies[%d].Index = %d", i, p.Index)
		}
	}
	info, err := os.Stat(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("OpenBolt+Load of %d policies: %s (file %d KiB)", n, elapsed.Round(time.Microsecond), info.Size()>>10)
}

func BenchmarkBoltLoad(b *testing.B) {
	for _, n := range []int{100, 10000} {
		b.Run(fmt.Sprintf("policies=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			storeN(b, dir, n)
			s := openBolt(b, dir)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				reg, err := s.Load(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if len(reg.Policies) != n {
					b.Fatalf("Load returned %d policies, want %d", len(reg.Policies), n)
				}
			}
		})
	}
}

func BenchmarkBoltOpenLoad(b *testing.B) {
	const n = 10000
	dir := b.TempDir()
	storeN(b, dir, n)
	ctx := context.Background()
	b.Run(fmt.Sprintf("policies=%d", n), func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s, err := OpenBolt(dir, BoltOptions{})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.Load(ctx); err != nil {
				b.Fatal(err)
			}
			if err := s.Close(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkBoltPutPolicy times a durable PutPolicy: "sequential" is what
// one lone writer waits for each (a commit and its fsync), "parallel" the
// time per put with 64 writers per CPU at once (bbolt runs one write
// transaction at a time).
func BenchmarkBoltPutPolicy(b *testing.B) {
	ctx := context.Background()
	b.Run("sequential", func(b *testing.B) {
		s := openBolt(b, b.TempDir())
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if err := putPolicy(ctx, s, testPolicy(i%1000)); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		s := openBolt(b, b.TempDir())
		b.ReportAllocs()
		b.SetParallelism(64)
		var mu sync.Mutex
		next := 0
		b.RunParallel(func(pb *testing.PB) {
			mu.Lock()
			i := next
			next += 1000
			mu.Unlock()
			for pb.Next() {
				if err := putPolicy(ctx, s, testPolicy(i%100000)); err != nil {
					b.Error(err)
					return
				}
				i++
			}
		})
	})
}

// The asleep record is part of the stored format, of bolt's policy values
// and etcd's registration alike: "sleep_marked", left out when false so
// that records written before it existed read the same.
func TestPolicyRecordSleepMarked(t *testing.T) {
	for _, marked := range []bool{false, true} {
		p := testPolicy(0)
		p.SleepMarked = marked
		b, err := json.Marshal(recordOf(p))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(b), `"sleep_marked":true`); got != marked {
			t.Errorf("marked %v: stored %s", marked, b)
		}
		if !marked && strings.Contains(string(b), "sleep_marked") {
			t.Errorf("unmarked: stored %s; want no sleep_marked", b)
		}
		var rec policyRecord
		if err := json.Unmarshal(b, &rec); err != nil {
			t.Fatal(err)
		}
		if got := rec.policy(); !reflect.DeepEqual(got, p) {
			t.Errorf("read back %+v; want %+v", got, p)
		}
	}
}
