package main

// The Go side of the entry points verbs.c defines so that no call reaches
// the real libibverbs with goroce's objects (_ibv_query_gid_ex and
// _ibv_query_gid_table name each GID's interface).

/*
#include "shim.h"
*/
import "C"

import "net"

// goroce_dev_ifindex is the index of the interface the context's device
// is on (ibv_gid_entry's ndev_ifindex), 0 if it has none.
//
//export goroce_dev_ifindex
func goroce_dev_ifindex(h C.uintptr_t) C.int {
	c := handle[*devctx](h)
	ifi, err := net.InterfaceByName(c.ep.Netdev)
	if err != nil {
		return 0
	}
	return C.int(ifi.Index)
}
