package sim

import (
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"slices"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// crashImage is what a crash leaves of fs: everything synced, and pct% of
// what was not — each file not yet in its directory kept or not, each 4 KiB
// block of a file's unsynced data kept or not — as vfs.MemFS.CrashClone
// draws it, but with each file's draws its own, from rng and the file's
// name. CrashClone draws its random numbers over a directory's files in the
// order of a Go map, one stream for all, so that which file gets which draw
// changes from run to run; and how much of the WAL Pebble's writer had
// written when the crash came varies with its goroutine, which would shift
// the draws of every file after it (the store's directory holds the WAL and
// the alive mark, both with unsynced bytes). A seed so replays its crash.
func crashImage(fs *vfs.MemFS, pct int, rng *rand.Rand) (*vfs.MemFS, error) {
	if pct <= 0 {
		return fs.CrashClone(vfs.CrashCloneCfg{}), nil
	}
	// Whatever CrashClone draws at 100%, it keeps everything.
	all := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(0, 0))})
	if pct >= 100 {
		return all, nil
	}
	synced := fs.CrashClone(vfs.CrashCloneCfg{})
	out := vfs.NewCrashableMem()
	if err := copyCrashed(out, synced, all, "", pct, [2]uint64{rng.Uint64(), rng.Uint64()}); err != nil {
		return nil, fmt.Errorf("sim: crash image: %w", err)
	}
	return out, nil
}

// copyCrashed writes into out the directory dir of all (every byte written)
// as a crash leaves it of synced (the bytes synced) and pct% of the rest.
func copyCrashed(out, synced, all *vfs.MemFS, dir string, pct int, seed [2]uint64) error {
	names, err := all.List(dir)
	if err != nil {
		return err
	}
	slices.Sort(names)
	for _, name := range names {
		path := all.PathJoin(dir, name)
		h := fnv.New64a()
		_, _ = io.WriteString(h, path)
		rng := rand.New(rand.NewPCG(seed[0], seed[1]^h.Sum64()))
		st, err := all.Stat(path)
		if err != nil {
			return err
		}
		_, err = synced.Stat(path)
		inSynced := err == nil
		if !inSynced && rng.IntN(100) >= pct {
			continue // created, and its directory not synced since
		}
		if st.IsDir() {
			if err := out.MkdirAll(path, 0o755); err != nil {
				return err
			}
			if err := copyCrashed(out, synced, all, path, pct, seed); err != nil {
				return err
			}
			continue
		}
		data, err := readAll(all, path)
		if err != nil {
			return err
		}
		var kept []byte
		if inSynced {
			if kept, err = readAll(synced, path); err != nil {
				return err
			}
		}
		const block = 4096
		for i := 0; i < len(data); i += block {
			if rng.IntN(100) >= pct {
				continue
			}
			b := data[i:min(i+block, len(data))]
			if grow := i + len(b) - len(kept); grow > 0 {
				kept = append(kept, make([]byte, grow)...) // zeros for blocks past the synced end
			}
			copy(kept[i:], b)
		}
		if err := writeSynced(out, path, kept); err != nil {
			return err
		}
	}
	d, err := out.OpenDir(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func readAll(fs vfs.FS, path string) ([]byte, error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

func writeSynced(fs vfs.FS, path string, data []byte) error {
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	return firstErr(f.Sync(), f.Close())
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
