package main

import (
	"io"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/internal/endpoint"
)

// openCM opens the device a tool of librdmacm's runs on and starts its
// connection manager (QP1). The caller closes the manager, then the
// endpoint.
func openCM(ec endpoint.Config, stderr io.Writer, name string) (*endpoint.Endpoint, *cm.Manager, error) {
	ep, err := endpoint.Open(ec)
	if err != nil {
		return nil, nil, err
	}
	ep.WarnStats(stderr, name)
	m, err := cm.New(ep.Device, cm.Options{})
	if err != nil {
		ep.Close()
		return nil, nil, err
	}
	return ep, m, nil
}
