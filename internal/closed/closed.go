// Package closed holds the one error every object of a closed device
// wraps, so that mr, cq, qp and device (which exports it as
// transport.ErrClosed) share a value errors.Is can match.
package closed

import "errors"

// Err is transport.ErrClosed.
var Err = errors.New("device closed")
