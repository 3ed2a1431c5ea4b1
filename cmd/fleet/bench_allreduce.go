package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/fleetml/fleet/dist"
	"github.com/fleetml/fleet/internal/units"
)

// benchAllReduceCmd is `fleet bench allreduce`: the tcp backend's float32
// sum all-reduce on loopback, for each world size and message size, with
// the algorithm and bus bandwidths nccl-tests reports.
func benchAllReduceCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench allreduce", flag.ContinueOnError)
	worlds := fs.String("world", "2,4", "world sizes to time, comma-separated")
	sizes := fs.String("sizes", "all", "message sizes, comma-separated (4KiB,1MiB,64MB, ...), or all: 4 KiB to 256 MiB by factors of 4")
	iters := fs.Int("iters", 0, "timed all-reduces per size (0: as many as move about 1 GB, 3 to 200)")
	chunk := fs.String("chunk", "", "the ring's pipelining unit (default 256KiB)")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	var ws []int
	for _, f := range strings.Split(*worlds, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("--world: want world sizes such as 2,4, got %q", *worlds)
		}
		ws = append(ws, n)
	}
	var ss []int64
	if strings.TrimSpace(*sizes) == "all" {
		ss = dist.DefaultBenchSizes()
	} else {
		for _, f := range strings.Split(*sizes, ",") {
			n, err := units.ParseBytes(f)
			if err != nil {
				return fmt.Errorf("--sizes: %w", err)
			}
			if n < 4 {
				return fmt.Errorf("--sizes: %q is less than one float32", f)
			}
			ss = append(ss, n)
		}
	}
	if *iters < 0 {
		return fmt.Errorf("--iters must not be negative")
	}
	opts := dist.BenchOptions{Iters: *iters}
	if *chunk != "" {
		n, err := units.ParseBytes(*chunk)
		if err != nil || n < 4 || n > 1<<30 {
			return fmt.Errorf("--chunk: want a size between 4 bytes and 1 GiB, got %q", *chunk)
		}
		opts.TCP.ChunkBytes = int(n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(stdout, "tcp ring all-reduce (float32 sum) on loopback, each rank a goroutine of this process with its own connections;\n"+
		"median time per size; algbw = bytes/time, busbw = algbw × 2(n−1)/n as nccl-tests computes it\n")
	for i, w := range ws {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		res, err := dist.BenchAllReduce(ctx, ss, w, opts)
		if len(res) > 0 {
			dist.WriteBenchTable(stdout, res)
		}
		if err != nil {
			return fmt.Errorf("%d ranks: %w", w, err)
		}
	}
	return nil
}
