package ckpt

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/ferryml/ferry/internal/storage"
)

// SourceFor returns the Source of the checkpoint directory loc: a
// DirSource (mapped files) when loc is on a local or mounted file system,
// else a StorageSource.
func SourceFor(loc string) Source {
	if p, ok := storage.LocalPath(loc); ok {
		return DirSource(p)
	}
	return StorageSource(loc)
}

// SinkFor returns the Sink that writes into the output directory loc: a
// DirSink (direct, kernel-copy or buffered writes) when loc is local, else
// a StorageSink.
func SinkFor(loc string) Sink {
	if p, ok := storage.LocalPath(loc); ok {
		return DirSink(p)
	}
	return StorageSink(loc)
}

var stepRE = regexp.MustCompile(`^step-([0-9]+)$`)

// Locate finds the checkpoint inside what a user named (a directory or an
// s3:// prefix) and returns its directory, with a note saying which layout
// it found ("" when loc itself is the checkpoint):
//
//	loc/.metadata or loc/*.safetensors              loc itself
//	loc/pytorch_model_fsdp_0/.metadata              accelerate's model checkpoint
//	loc/sharded/*.safetensors                       torch's HF storage writer
//	loc/[checkpoint/]step-N/{.metadata,*.safetensors}  torchtitan, the highest N
//
// A new layout is one more case here. A missing local directory gives an
// error wrapping fs.ErrNotExist; a location holding none of these one
// wrapping ErrNotCheckpoint.
func Locate(ctx context.Context, loc string) (dir, note string, err error) {
	if _, err := storage.Stat(ctx, storage.Join(loc, ".metadata")); err == nil {
		return loc, "", nil
	}
	infos, err := storage.List(ctx, loc)
	if err != nil {
		return "", "", fmt.Errorf("%s: %w", loc, err)
	}
	if len(infos) == 0 {
		if p, ok := storage.LocalPath(loc); ok {
			if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
				return "", "", fmt.Errorf("%s: %w", loc, fs.ErrNotExist)
			}
		}
		return "", "", fmt.Errorf("%s: %w", loc, ErrNotCheckpoint)
	}
	prefix := strings.TrimSuffix(storage.Join(loc, "x"), "x")
	bestStep, best := -1, ""
	for _, in := range infos {
		rel := filepath.ToSlash(strings.TrimPrefix(in.Loc, prefix))
		if !strings.Contains(rel, "/") && strings.HasSuffix(rel, ".safetensors") {
			return loc, "", nil // safetensors shards
		}
		parts := strings.Split(rel, "/")
		if len(parts) == 2 && parts[1] == ".metadata" && parts[0] == "pytorch_model_fsdp_0" {
			d := storage.Join(loc, parts[0])
			return d, "using accelerate model checkpoint " + d, nil
		}
		if len(parts) == 2 && parts[0] == "sharded" && strings.HasSuffix(parts[1], ".safetensors") {
			d := storage.Join(loc, "sharded")
			return d, "using HF storage writer shards " + d, nil
		}
		if n := len(parts); n >= 2 && (parts[n-1] == ".metadata" || strings.HasSuffix(parts[n-1], ".safetensors")) && n <= 3 {
			if m := stepRE.FindStringSubmatch(parts[n-2]); m != nil && (n == 2 || parts[0] == "checkpoint") {
				s, _ := strconv.Atoi(m[1])
				if s > bestStep {
					bestStep, best = s, storage.Join(loc, parts[:n-1]...)
				}
			}
		}
	}
	if best != "" {
		return best, "using torchtitan checkpoint " + best + " (highest step)", nil
	}
	return "", "", fmt.Errorf("%s: %w: no .metadata (and no pytorch_model_fsdp_0/ or step-N/ inside)", loc, ErrNotCheckpoint)
}
