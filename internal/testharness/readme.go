package testharness

import (
	"os"
	"strings"
	"testing"
)

// ShellWords splits a command line as sh would for the README's
// commands: words, 'single-quoted' strings, and a trailing &.
func ShellWords(tb testing.TB, line string) []string {
	tb.Helper()
	var words []string
	for line = strings.TrimSpace(line); line != ""; line = strings.TrimSpace(line) {
		if line[0] == '\'' {
			end := strings.IndexByte(line[1:], '\'')
			if end < 0 {
				tb.Fatalf("unclosed quote in %q", line)
			}
			words, line = append(words, line[1:end+1]), line[end+2:]
			continue
		}
		w, rest, _ := strings.Cut(line, " ")
		if w != "&" {
			words = append(words, w)
		}
		line = rest
	}
	return words
}

// ReadmeShBlock returns the first sh block of the README at path after
// heading, and the README's text after that block.
func ReadmeShBlock(tb testing.TB, path, heading string) (block, after string) {
	tb.Helper()
	readme, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(readme), heading)
	_, block, ok2 := strings.Cut(sec, "```sh\n")
	block, after, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		tb.Fatalf("README has no sh block after %q", heading)
	}
	return block, after
}
