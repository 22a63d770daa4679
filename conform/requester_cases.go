package conform

func requesterCases() []Case { return nil }
