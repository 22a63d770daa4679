package interop

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestReadmePairs reads the pairs from docs/tools.md, the page the lab
// run reads them from (interop -readme, interop/interop-lab.sh): an
// edit that breaks a pair's form, names no tool or gives flags roced
// refuses fails here, without the lab.
func TestReadmePairs(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(filepath.Join(root, ReadmePairsFile))
	if err != nil {
		t.Fatal(err)
	}
	pairs, err := ReadmePairs(string(text))
	if err != nil {
		t.Fatal(err)
	}
	dirs := map[string]bool{}
	for _, p := range pairs {
		dirs[p.Name()] = true
		// cmtime moves no data: its size is 0.
		if (p.Scenario.Size <= 0 && p.Scenario.Tool.Exchange != CmtimeConnects) || p.Scenario.Iters <= 0 {
			t.Errorf("%s: size %d iters %d", p.Name(), p.Scenario.Size, p.Scenario.Iters)
		}
		// The client names the server's address; the server names none.
		if last := p.Client.Argv[len(p.Client.Argv)-1]; strings.HasPrefix(last, "-") {
			t.Errorf("%s: client %v names no server", p.Name(), p.Client.Argv)
		}
	}
	for _, want := range []string{"readme/rc_pingpong@peer-server", "readme/write_bw@roced-server",
		"readme/rc_pingpong/reversed@roced-server", "readme/write_bw/reversed@peer-server",
		"readme/rping@peer-server", "readme/rping@roced-server",
		"readme/rdma_server@peer-server", "readme/rdma_server@roced-server",
		"readme/ucmatose@peer-server", "readme/ucmatose@roced-server",
		"readme/udaddy@peer-server", "readme/udaddy@roced-server",
		"readme/cmtime@peer-server", "readme/cmtime@roced-server"} {
		if !dirs[want] {
			t.Errorf("README pairs %v: no %s", dirs, want)
		}
	}
	var rev ReadmePair
	for _, p := range pairs {
		if p.Reversed {
			rev = p
			break
		}
	}
	for _, p := range pairs {
		if p.Scenario.Tool.Family == CM && p.Reversed {
			t.Errorf("%s: the rping pairs are run as written, not reversed", p.Name())
		}
	}
	if got, want := strings.Join(rev.Server.Argv, " ")+" | "+strings.Join(rev.Client.Argv, " "),
		"roced rc_pingpong -g 1 -s 4096 -n 1000 -c | ibv_rc_pingpong -d rxe0 -g 1 -s 4096 -n 1000 -c 192.0.2.1"; got != want {
		t.Errorf("reversed pair %q, want %q", got, want)
	}

	// The lab's form of each side: the HCA's device and GID index become
	// rxe0 and 1; roced's line is kept as written.
	l := &Lab{HostAddr: "192.0.2.1", GuestAddr: "192.0.2.2"}
	p := ReadmePair{Server: ReadmeLine{"goroce", strings.Fields("roced write_bw -x 1 -s 65536 -F")},
		Client: ReadmeLine{"hca", strings.Fields("ib_write_bw -d mlx5_0 -x 3 -s 65536 -F 192.0.2.1")}}
	if got, want := p.labArgv(p.Client, l, "/bin/roced"), strings.Fields("ib_write_bw -d rxe0 -x 1 -s 65536 -F 192.0.2.1"); !reflect.DeepEqual(got, want) {
		t.Errorf("HCA line in the lab: %v, want %v", got, want)
	}
	if got, want := p.labArgv(p.Server, l, "/bin/roced"), strings.Fields("/bin/roced write_bw -x 1 -s 65536 -F"); !reflect.DeepEqual(got, want) {
		t.Errorf("roced line in the lab: %v, want %v", got, want)
	}

	// Each bad text is otherwise whole, so that it is refused for its own
	// fault: a good pingpong section and a good rping section.
	good := "x\n" + ReadmeSection + "\n\n```sh\nhca$ ib_write_bw\ngoroce$ roced write_bw 1.2.3.4\n```\n"
	goodEx := "\n" + ReadmeCMSections[1] + "\n\n```sh\ngoroce$ roced rdma_server -s 192.0.2.1\nhca$ rdma_client -s 192.0.2.1\n```\n" +
		"\n" + ReadmeCMSections[2] + "\n\n```sh\nhca$ ucmatose -c 3\ngoroce$ roced ucmatose -s 192.0.2.2 -c 3\n```\n" +
		"\n" + ReadmeCMSections[3] + "\n\n```sh\nhca$ udaddy -c 3\ngoroce$ roced udaddy -s 192.0.2.2 -c 3\n```\n" +
		"\n" + ReadmeCMSections[4] + "\n\n```sh\nhca$ cmtime -c 3\ngoroce$ roced cmtime -s 192.0.2.2 -c 3\n```\n"
	goodCM := "\n" + ReadmeCMSections[0] + "\n\n```sh\nhca$ rping -s -a 192.0.2.2 -C 3\ngoroce$ roced rping -c -a 192.0.2.2 -C 3\n```\n" + goodEx
	if _, err := ReadmePairs(good + goodCM); err != nil {
		t.Fatalf("refused a good README: %v", err)
	}
	for _, bad := range []string{
		"no section",
		good,
		"x\n" + ReadmeSection + "\n\n```sh\nhca$ ibv_rc_pingpong -d rxe0\n```\n" + goodCM,
		"x\n" + ReadmeSection + "\n\n```sh\nhca$ ib_write_bw\nhost$ roced write_bw 1.2.3.4\n```\n" + goodCM,
		"x\n" + ReadmeSection + "\n\n```sh\nhca$ ib_write_bw\ngoroce$ roced write_bw -s 0 1.2.3.4\n```\n" + goodCM,
		good + "\n" + ReadmeCMSections[0] + "\n\n```sh\nhca$ rping -s\ngoroce$ roced rping -c -a 192.0.2.2 -C 3 -S 1\n```\n" + goodEx,
		// the server's line runs the client's program
		good + goodCM[:strings.Index(goodCM, goodEx)] + "\n" + ReadmeCMSections[1] + "\n\n```sh\ngoroce$ roced rdma_client -s 192.0.2.1\nhca$ rdma_client -s 192.0.2.1\n```\n",
		good + goodCM[:strings.Index(goodCM, goodEx)], // no rdma_server section
	} {
		if _, err := ReadmePairs(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}
