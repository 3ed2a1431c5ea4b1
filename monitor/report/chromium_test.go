package report

import (
	"context"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// chromium finds a headless-capable Chromium: $FLEET_CHROMIUM, or one of
// the usual names on PATH.
func chromium() string {
	if p := os.Getenv("FLEET_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browse runs headless Chromium on page with extra flags and returns its
// standard output.
func browse(t *testing.T, bin, page string, flags ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
		"--user-data-dir=" + t.TempDir(), "--window-size=1200,2400"}, flags...)
	args = append(args, "file://"+page)
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// TestChromiumRendersReport opens a report in headless Chromium, checks
// in the DOM it built that the plots have lines of many points, and in
// its screenshot that the lines' colours are on screen. The page is
// $FLEET_REPORT_HTML, else one made here from a synthetic run; the
// screenshot and DOM are kept in $FLEET_REPORT_SHOTS if set. With
// $FLEET_REPORT_DOM and $FLEET_REPORT_PNG (what scripts/report-check.sh
// made from a real run) it checks those files instead, without Chromium.
// $FLEET_REPORT_MIN_POINTS sets the points the loss and throughput lines
// need (20).
func TestChromiumRendersReport(t *testing.T) {
	minPoints := 20
	if s := os.Getenv("FLEET_REPORT_MIN_POINTS"); s != "" {
		var err error
		if minPoints, err = strconv.Atoi(s); err != nil {
			t.Fatalf("FLEET_REPORT_MIN_POINTS: %v", err)
		}
	}
	domFile, shot := os.Getenv("FLEET_REPORT_DOM"), os.Getenv("FLEET_REPORT_PNG")
	if domFile == "" || shot == "" {
		domFile, shot = browseReport(t)
	}
	dom, err := os.ReadFile(domFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkDOM(string(dom), minPoints); err != nil {
		t.Errorf("%s: %v", domFile, err)
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot %s: %v", shot, err)
	}
	if err := checkPixels(img); err != nil {
		t.Errorf("screenshot %s: %v", shot, err)
	}
}

// browseReport has Chromium dump the DOM of a page and screenshot it, and
// returns the two files.
func browseReport(t *testing.T) (domFile, shot string) {
	if testing.Short() {
		t.Skip("starts a browser; not in -short mode")
	}
	bin := chromium()
	if bin == "" {
		t.Skip("no chromium, chromium-browser or google-chrome on PATH (nor $FLEET_CHROMIUM): the report's rendering in a browser is not checked; apt-get install chromium")
	}
	page := os.Getenv("FLEET_REPORT_HTML")
	if page == "" {
		page = filepath.Join(t.TempDir(), ReportFile)
		if err := Write(makeRun(t, newRand(t), 60), page); err != nil {
			t.Fatal(err)
		}
	}
	page, err := filepath.Abs(page)
	if err != nil {
		t.Fatal(err)
	}
	shots := os.Getenv("FLEET_REPORT_SHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	domFile, shot = filepath.Join(shots, "report.dom.html"), filepath.Join(shots, "report.png")
	t0 := time.Now()
	if err := os.WriteFile(domFile, browse(t, bin, page, "--dump-dom"), 0o644); err != nil {
		t.Fatal(err)
	}
	browse(t, bin, page, "--screenshot="+shot)
	t.Logf("chromium: %.1f s for the DOM and the screenshot", time.Since(t0).Seconds())
	return domFile, shot
}

// checkDOM checks that the browser built the plots: the loss and
// throughput plots each have a line of at least minPoints points, and
// every other plot a line or a dot.
func checkDOM(dom string, minPoints int) error {
	plots := plotPoints(dom)
	for _, title := range []string{"Loss", "Throughput"} {
		longest := 0
		for _, n := range plots[title] {
			longest = max(longest, n)
		}
		if longest < minPoints {
			return fmt.Errorf("plot %q: longest line %d points, want at least %d (plots: %v)", title, longest, minPoints, plots)
		}
	}
	for title, lines := range plots {
		if title != "Step phases" && len(lines) == 0 {
			return fmt.Errorf("plot %q has no line", title)
		}
	}
	if len(plots) < 3 {
		return fmt.Errorf("%d plots in the page, want at least 3", len(plots))
	}
	return nil
}

// checkPixels checks that the first two plot colours (train loss and val
// loss, and every single-series plot's line) are on screen: a run's
// lines cover thousands of pixels, an empty plot none.
func checkPixels(img image.Image) error {
	b := img.Bounds()
	if b.Dx() < 800 || b.Dy() < 1000 {
		return fmt.Errorf("%d×%d pixels, want the 1200×2400 window", b.Dx(), b.Dy())
	}
	want := []struct {
		color string
		min   int
	}{{Palette[0], 1000}, {Palette[1], 150}}
	for _, w := range want {
		var r0, g0, b0 int
		fmt.Sscanf(w.color, "#%02x%02x%02x", &r0, &g0, &b0)
		n := 0
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				r, g, bb, _ := img.At(x, y).RGBA()
				if near(int(r>>8), r0) && near(int(g>>8), g0) && near(int(bb>>8), b0) {
					n++
				}
			}
		}
		if n < w.min {
			return fmt.Errorf("%d pixels of the plot colour %s, want at least %d", n, w.color, w.min)
		}
	}
	return nil
}

func near(a, b int) bool { return a-b <= 24 && b-a <= 24 }
