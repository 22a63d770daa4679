package perftest

// Messages lists the sizes of the TCP messages of one step, in order (a
// StepClose is not included: its "done" is not a lockstep message).
func (st Step) Messages(withGID bool) []int {
	switch st.Kind {
	case StepVersion:
		return []int{VersionSize}
	case StepSysData:
		return []int{4, 4}
	case StepMTU:
		return []int{2}
	case StepNegotiate:
		return []int{NegotiateSize}
	case StepRecord:
		if withGID {
			return []int{RecordSize}
		}
		return []int{RecordSizeNoGID}
	case StepBWReport:
		return []int{8, 8, 8, 8, 8}
	}
	return nil
}
