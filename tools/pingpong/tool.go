package pingpong

import "fmt"

// Tool is one of the four rdma-core example programs.
type Tool int

const (
	RC  Tool = iota // ibv_rc_pingpong
	UC              // ibv_uc_pingpong
	UD              // ibv_ud_pingpong
	SRQ             // ibv_srq_pingpong
)

// MaxQP is srq_pingpong's MAX_QP: it always exchanges this many records.
const MaxQP = 256

var toolNames = [...]string{RC: "rc_pingpong", UC: "uc_pingpong", UD: "ud_pingpong", SRQ: "srq_pingpong"}

// String returns the tool's roced command ("rc_pingpong").
func (t Tool) String() string {
	if t < 0 || int(t) >= len(toolNames) {
		return fmt.Sprintf("Tool(%d)", int(t))
	}
	return toolNames[t]
}

// Binary is the real program's name.
func (t Tool) Binary() string { return "ibv_" + t.String() }

// ToolByName accepts "rc_pingpong" or "ibv_rc_pingpong" (and so on).
func ToolByName(name string) (Tool, error) {
	for i, n := range toolNames {
		if name == n || name == "ibv_"+n {
			return Tool(i), nil
		}
	}
	return 0, fmt.Errorf("pingpong: unknown tool %q", name)
}

// records is how many records the tool sends each way.
func (t Tool) records() int {
	if t == SRQ {
		return MaxQP
	}
	return 1
}
