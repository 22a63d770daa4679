package conform

import _ "embed"

// RequesterScript is goroce's requester for the requester cases no tool's
// client plays (a SEND then a READ on one QP; rnr_retry below 7): a
// Python program over pyverbs, rdma-core's Python verbs, that speaks
// ibv_rc_pingpong's exchange and ends as that tool ends. roced conform
// --requester-script prints it; put it on the peer and name it with
// --peer-python (PeerConfig.Python).
//
//go:embed requester.py
var RequesterScript string
