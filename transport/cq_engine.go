package transport

import "github.com/goroce/goroce/internal/hook"

// MirrorCQ goes to libgoroce through internal/hook until the hook goes.
func init() {
	hook.MirrorCQ = (*CQ).setMirror
}
