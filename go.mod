module github.com/goroce/goroce

go 1.26.8

require github.com/gopacket/gopacket v1.7.7

require (
	github.com/vishvananda/netlink v1.3.1 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
