package main

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestABICheck builds testdata/abi_check.c and runs it preloaded: the
// entry points that used to fall through to the real libibverbs (GID
// entries, P_Key index, data-in-order, ECE, import, dma-buf),
// the errno of refused verbs (returned and in errno alike), a flow label
// past 20 bits taken as its low 20, phys_port_cnt_ex and cmd_fd.
func TestABICheck(t *testing.T) {
	bin := buildC(t, "abi_check")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := preloaded(ctx, addrA, bin).CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("abi_check: ok")) {
		t.Fatalf("abi_check: %v\n%s", err, out)
	}
}
