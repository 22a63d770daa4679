package lib

func TestHelperWithoutDoc() {}
