// Command geth-state-peer drives go-ethereum's own state database (core/state over triedb with
// the path scheme, on pebble or in memory) through proofkit's Paprika workload, so that
// `proofkit state bench --peer geth` can put geth's figures beside proofkit's and compare the
// state roots of the two implementations.
//
// The workload must stay identical to crates/proofkit-state/src/bench.rs:
//   - block n (1-based) creates accounts i = 0..A-1 at address keccak256(le64(n) || le64(i))[:20],
//     nonce 0, balance n, no code;
//   - each gets slots s = 0..S-1: key = s as a 32-byte big-endian word,
//     value = n*1_000_000 + i*16 + s + 1 (32-byte big-endian);
//   - the state root is computed (StateDB.Commit) at every block.
//
// Output (stdout): one JSON object per line.
//
//	{"type":"progress","block":N}                                         every blocks/100 blocks
//	{"type":"row","at_block":N,"blocks_per_s":F,"space_bytes":B,"peak_rss_kb":K,"root":"0x.."}
//	{"type":"summary", ... "final_root":"0x..", "read_back_seconds":F, ...}
//
// Errors go to stderr with a non-zero exit status.
package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/rawdb"
	"github.com/ethereum/go-ethereum/core/state"
	"github.com/ethereum/go-ethereum/core/tracing"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethdb"
	"github.com/ethereum/go-ethereum/ethdb/pebble"
	"github.com/ethereum/go-ethereum/log"
	"github.com/ethereum/go-ethereum/params"
	"github.com/ethereum/go-ethereum/triedb"
	"github.com/ethereum/go-ethereum/triedb/pathdb"
	"github.com/ethereum/go-ethereum/version"
	"github.com/holiman/uint256"
)

// The cache sizes of a geth node run with its default settings (eth/ethconfig.Defaults:
// DatabaseCache 2048, TrieCleanCache 614, SnapshotCache 409, TrieDirtyCache 1024, the last
// which pathdb caps at 256 MiB).
const (
	pebbleCacheMB   = 2048
	pebbleHandles   = 2048
	trieCleanBytes  = 614 << 20
	stateCleanBytes = 409 << 20
	writeBuffer     = 256 << 20
)

type config struct {
	blocks, accounts, slots, rows, readBack uint64
	dir                                     string
	history                                 bool
}

func main() {
	var c config
	flag.Uint64Var(&c.blocks, "blocks", 1000, "blocks to write")
	flag.Uint64Var(&c.accounts, "accounts-per-block", 1000, "new accounts per block")
	flag.Uint64Var(&c.slots, "storage-per-account", 1, "storage slots per new account")
	flag.Uint64Var(&c.rows, "rows", 10, "a row (with the state root) every blocks/rows blocks")
	flag.Uint64Var(&c.readBack, "read-back", 0, "accounts to read back at the end (0: all)")
	flag.StringVar(&c.dir, "dir", "", "fresh database directory (pebble + freezer); in memory when empty")
	flag.BoolVar(&c.history, "state-history", true, "on disk: keep geth's state history in the freezer, as a node does")
	flag.Parse()
	if flag.NArg() != 0 {
		fail(fmt.Errorf("unexpected argument %q", flag.Arg(0)))
	}
	if c.blocks == 0 || c.accounts == 0 {
		fail(errors.New("-blocks and -accounts-per-block must be positive"))
	}
	if c.rows == 0 {
		c.rows = 1
	}
	total := c.blocks * c.accounts
	if c.readBack == 0 || c.readBack > total {
		c.readBack = total
	}
	// geth logs to stderr at info level by default; keep only warnings and errors.
	log.SetDefault(log.NewLogger(log.NewTerminalHandlerWithLevel(os.Stderr, log.LevelWarn, false)))
	if err := run(&c); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "geth-state-peer:", err)
	os.Exit(1)
}

// address is account i of block n (bench.rs's `address`).
func address(n, i uint64) common.Address {
	var seed [16]byte
	binary.LittleEndian.PutUint64(seed[:8], n)
	binary.LittleEndian.PutUint64(seed[8:], i)
	return common.BytesToAddress(crypto.Keccak256(seed[:])[:20])
}

func word(x uint64) common.Hash {
	var h common.Hash
	binary.BigEndian.PutUint64(h[24:], x)
	return h
}

func emit(v map[string]any) {
	b, err := json.Marshal(v)
	if err != nil {
		fail(err)
	}
	fmt.Println(string(b))
}

type store struct {
	kv     ethdb.KeyValueStore
	disk   ethdb.Database
	tdb    *triedb.Database
	sdb    state.Database
	memory bool
	dir    string
}

func open(c *config) (*store, error) {
	s := &store{memory: c.dir == "", dir: c.dir}
	pc := *pathdb.Defaults
	pc.TrieCleanSize = trieCleanBytes
	pc.StateCleanSize = stateCleanBytes
	pc.WriteBufferSize = writeBuffer
	if s.memory {
		s.disk = rawdb.NewMemoryDatabase()
		s.kv = s.disk
	} else {
		if entries, err := os.ReadDir(c.dir); err == nil && len(entries) > 0 {
			return nil, fmt.Errorf("%s: not empty (the harness wants a fresh directory)", c.dir)
		}
		kv, err := pebble.New(filepath.Join(c.dir, "chaindata"), pebbleCacheMB, pebbleHandles, "", false)
		if err != nil {
			return nil, err
		}
		s.kv = kv
		ancient := ""
		if c.history {
			ancient = filepath.Join(c.dir, "chaindata", "ancient")
		}
		if ancient == "" {
			s.disk = rawdb.NewDatabase(kv)
		} else if s.disk, err = rawdb.Open(kv, rawdb.OpenOptions{Ancient: ancient}); err != nil {
			kv.Close()
			return nil, err
		}
	}
	s.tdb = triedb.NewDatabase(s.disk, &triedb.Config{PathDB: &pc})
	s.sdb = state.NewDatabase(s.tdb, state.NewCodeDB(s.disk))
	return s, nil
}

func (s *store) close() {
	s.tdb.Close()
	s.disk.Close()
}

// spaceUsed is the bytes on disk under the directory; in memory, the bytes of the keys and
// values in the key-value store plus the layers pathdb still holds above it.
func (s *store) spaceUsed() uint64 {
	var n uint64
	if !s.memory {
		filepath.WalkDir(s.dir, func(_ string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				if info, err := d.Info(); err == nil {
					n += uint64(info.Size())
				}
			}
			return nil
		})
		return n
	}
	it := s.kv.NewIterator(nil, nil)
	for it.Next() {
		n += uint64(len(it.Key()) + len(it.Value()))
	}
	it.Release()
	diffs, nodes, _ := s.tdb.Size()
	return n + uint64(diffs) + uint64(nodes)
}

func peakRSSKB() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			v, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return v
		}
	}
	return 0
}

// cpuSeconds is the user + system CPU time of the process so far (all threads: geth hashes and
// flushes on background goroutines).
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func run(c *config) error {
	s, err := open(c)
	if err != nil {
		return err
	}
	defer s.close()
	// A post-merge mainnet rule set: empty accounts are deleted (EIP-158), as in every block
	// since Spurious Dragon; none of this workload's accounts is empty.
	rules := params.MainnetChainConfig.Rules(big.NewInt(30_000_000), true, 1_800_000_000)
	step := max(c.blocks/c.rows, 1)
	progressStep := max(c.blocks/100, 1)
	root := types.EmptyRootHash
	var (
		excluded        time.Duration // time spent measuring the space, not the workload
		excludedCPU     float64
		cpu0            = cpuSeconds()
		writeS, commitS time.Duration
		start           = time.Now()
		balance         uint256.Int
		firstMs, lastMs []float64
		tenth           = max(c.blocks/10, 1)
	)
	for n := uint64(1); n <= c.blocks; n++ {
		t0 := time.Now()
		st, err := state.New(root, s.sdb)
		if err != nil {
			return fmt.Errorf("block %d: opening the parent state: %w", n, err)
		}
		balance.SetUint64(n)
		for i := uint64(0); i < c.accounts; i++ {
			addr := address(n, i)
			st.SetBalance(addr, &balance, tracing.BalanceChangeUnspecified)
			for k := uint64(0); k < c.slots; k++ {
				st.SetState(addr, word(k), word(n*1_000_000+i*16+k+1))
			}
		}
		t1 := time.Now()
		root, err = st.Commit(rules, n)
		if err != nil {
			return fmt.Errorf("block %d: commit: %w", n, err)
		}
		t2 := time.Now()
		writeS += t1.Sub(t0)
		commitS += t2.Sub(t1)
		ms := float64(t2.Sub(t0).Microseconds()) / 1e3
		if n <= tenth {
			firstMs = append(firstMs, ms)
		}
		if n > c.blocks-tenth {
			lastMs = append(lastMs, ms)
		}
		if n%progressStep == 0 {
			emit(map[string]any{"type": "progress", "block": n})
		}
		if n%step == 0 || n == c.blocks {
			elapsed := time.Since(start) - excluded
			t := time.Now()
			c := cpuSeconds()
			space := s.spaceUsed()
			excluded += time.Since(t)
			excludedCPU += cpuSeconds() - c
			emit(map[string]any{
				"type":         "row",
				"at_block":     n,
				"blocks_per_s": float64(n) / elapsed.Seconds(),
				"space_bytes":  space,
				"peak_rss_kb":  peakRSSKB(),
				"root":         root.Hex(),
			})
		}
	}
	writeSeconds := (time.Since(start) - excluded).Seconds()
	writeCPU := cpuSeconds() - cpu0 - excludedCPU

	// Flush every layer pathdb keeps in memory into the key-value store (proofkit finalizes
	// its pending blocks before the read-back too).
	t := time.Now()
	if err := s.tdb.Commit(root, false); err != nil {
		return fmt.Errorf("flushing the layers: %w", err)
	}
	flushSeconds := time.Since(t).Seconds()
	space := s.spaceUsed()

	// Read the first M accounts back through geth's state reader (its flat state, falling back
	// to the trie) on every core, checking each balance.
	threads := runtime.GOMAXPROCS(0)
	chunk := (c.readBack + uint64(threads) - 1) / uint64(threads)
	errs := make([]error, threads)
	var wg sync.WaitGroup
	t = time.Now()
	for w := 0; w < threads; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r, err := s.sdb.Reader(root)
			if err != nil {
				errs[w] = err
				return
			}
			for k := uint64(w) * chunk; k < min(uint64(w+1)*chunk, c.readBack); k++ {
				n, i := k/c.accounts+1, k%c.accounts
				acct, err := r.Account(address(n, i))
				if err != nil {
					errs[w] = fmt.Errorf("read-back of account %d: %w", k, err)
					return
				}
				if acct == nil || !acct.Balance.Eq(uint256.NewInt(n)) {
					errs[w] = fmt.Errorf("read-back: account %d is wrong", k)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	readSeconds := time.Since(t).Seconds()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	emit(map[string]any{
		"type":                        "summary",
		"geth_version":                fmt.Sprintf("%d.%d.%d", version.Major, version.Minor, version.Patch),
		"blocks":                      c.blocks,
		"final_root":                  root.Hex(),
		"write_seconds":               writeSeconds,
		"write_cpu_seconds":           writeCPU,
		"cpu_seconds":                 cpuSeconds() - cpu0,
		"seconds_in_block_writes":     writeS.Seconds(),
		"seconds_in_commits":          commitS.Seconds(),
		"block_ms_median_first_tenth": median(firstMs),
		"block_ms_median_last_tenth":  median(lastMs),
		"flush_seconds":               flushSeconds,
		"space_bytes":                 space,
		"accounts_read_back":          c.readBack,
		"read_back_seconds":           readSeconds,
		"read_back_threads":           threads,
		"peak_rss_kb":                 peakRSSKB(),
		"in_memory":                   s.memory,
		"state_history":               !s.memory && c.history,
	})
	return nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	ys := append([]float64(nil), xs...)
	sort.Float64s(ys)
	return ys[len(ys)/2]
}
