"""The HTML page in a real headless Chromium: it loads without console errors or network requests and shows
the tables and plots. Chromium is driven over its own DevTools pipe (``--remote-debugging-pipe``: JSON
messages separated by NUL bytes on file descriptors 3 and 4), so no driver package is needed; without a
Chromium installed the tests skip, and a Chromium that is installed but does not start (a stub, a broken package)
skips them in one line naming it and its repair (issue 65)."""

import base64
import json
import os
import select
import shutil
import struct
import subprocess
import time
import zlib
from pathlib import Path

import pytest

from leaderboard import ranking
from leaderboard.render import html_page
from leaderboard.store import Store

BROWSER = next((path for path in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if path), None)
BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BROWSER is None or BASH is None,
                                reason="no Chromium (apt-get install chromium) or no bash to start it with")
LOAD_TIMEOUT_SECONDS = 30
START_TIMEOUT_SECONDS = 30
"""How long a browser may take to answer its first command before it counts as one that does not start."""


class BrowserBroken(Exception):
    """The browser found is installed but does not start or answer."""


class DevTools:
    """A headless browser and one page, with every event it reported kept in ``events``."""

    def __init__(self, profile):
        to_browser_read, self._to_browser = os.pipe()
        self._from_browser, from_browser_write = os.pipe()
        # The browser reads commands on fd 3 and writes replies on fd 4; bash moves the pipe ends there
        # (dash cannot name descriptors above 9, and a preexec_fn is unsafe once torch has started threads).
        self._process = subprocess.Popen(
            [BASH, "-c", f'exec "$0" "$@" 3<&{to_browser_read} 4>&{from_browser_write}', BROWSER, "--headless",
             "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe", f"--user-data-dir={profile}",
             "--no-first-run", "about:blank"],
            pass_fds=(to_browser_read, from_browser_write), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser_read)
        os.close(from_browser_write)
        self._buffer, self._next_id, self.events = b"", 0, []
        try:
            target = self.call("Target.createTarget", url="about:blank",
                               deadline=time.monotonic() + START_TIMEOUT_SECONDS)["targetId"]
        except (RuntimeError, TimeoutError, OSError, ValueError, KeyError) as error:
            self.close()
            raise BrowserBroken(f"{BROWSER} is installed but does not start ({type(error).__name__}: "
                                f"{' '.join(str(error).split())[:200]}); reinstall it (apt-get install --reinstall "
                                "chromium) or remove it from PATH") from None
        self._session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session=True)

    def call(self, method, session=False, deadline=None, **params):
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self._session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def _receive(self, deadline=None):
        while b"\0" not in self._buffer:
            if deadline is not None and not select.select([self._from_browser], [], [],
                                                          max(0.0, deadline - time.monotonic()))[0]:
                raise TimeoutError("the browser sent nothing in time")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError("the browser closed the pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def load(self, url):
        self.call("Page.navigate", session=True, url=url)
        deadline = time.monotonic() + LOAD_TIMEOUT_SECONDS
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            self.events.append(self._receive(deadline))

    def evaluate(self, expression):
        return self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True)["result"]["value"]

    def problems(self) -> list[str]:
        """Console errors, uncaught exceptions, error log entries and requests that left the file."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(f"exception: {params['exceptionDetails'].get('text')}")
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(f"console.{params['type']}: {params.get('args')}")
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                found.append(f"log: {params['entry']['text']}")
            elif method == "Network.requestWillBeSent" and not params["request"]["url"].startswith(("file:", "data:")):
                found.append(f"request: {params['request']['url']}")
        return found

    def close(self):
        self._process.kill()
        self._process.wait(timeout=60)
        os.close(self._to_browser)
        os.close(self._from_browser)


def started(profile) -> DevTools:
    """The browser started with ``profile``; one that is installed but does not start skips the test in one line."""
    try:
        return DevTools(profile)
    except BrowserBroken as broken:
        pytest.skip(str(broken))


@pytest.fixture
def browser(tmp_path):
    devtools = started(tmp_path / "profile")
    yield devtools
    devtools.close()


def test_page_loads_cleanly_and_shows_tables_and_plots(browser, tmp_path, make_run):
    runs = tmp_path / "runs"
    for budget in (10, 100):
        for seed in range(2):
            make_run(runs, "digits", method="de", seed=seed, budget=budget, amount=2 / budget + 0.01 * seed)
            make_run(runs, "toy-gap", method="swag", seed=seed, budget=budget, amount=2 / budget + 0.01 * seed)
    from leaderboard.submission import run_folders, score_run

    with Store(tmp_path / "db.sqlite") as db:
        db.insert([score_run(folder, "alice") for folder in run_folders([runs])])
        page = tmp_path / "page.html"
        page.write_text(html_page(ranking.tracks(db.runs())))
    browser.load(page.as_uri())
    assert browser.problems() == []
    # the summary across tasks (two tasks at each budget), per track its table, and per digits track (two budgets)
    # the table of its test blocks
    assert browser.evaluate("document.querySelectorAll('table').length") == 7
    headers = browser.evaluate("[...document.querySelectorAll('th')].map(th => th.textContent.trim())")
    assert {"agreement", "total_variation", "w2", "seeds", "epochs used"} <= set(headers)
    assert browser.evaluate("document.body.innerText").count("HMC noise floor") >= 4
    # digits: agreement and TV against budget + a reliability diagram; toy-gap: W2 + a reliability diagram.
    assert browser.evaluate("document.querySelectorAll('svg polyline').length") >= 5
    assert browser.evaluate("[...document.querySelectorAll('svg')].every(s => s.getBBox().width > 0)")


OVERLAPPING_X_TICK_LABELS = """
[...document.querySelectorAll('svg')].flatMap(svg => {
  const boxes = [...svg.querySelectorAll('text.tick[text-anchor=middle]')].map(t => [t.textContent, t.getBBox()]);
  return boxes.flatMap(([a, p], i) => boxes.slice(i + 1).filter(([b, q]) =>
    p.x < q.x + q.width && q.x < p.x + p.width && p.y < q.y + q.height && q.y < p.y + p.height).map(([b]) => a + '/' + b));
})"""


def test_labels_legends_and_every_budget_tick_show_in_the_browser(browser, tmp_path, make_run):
    """Two tasks at budgets as close as 10 and 12: every budget is labelled under each chart, and no two labels'
    rendered boxes overlap; labels, the legend of the shown hashes and the notes are on the page."""
    budgets = (3, 10, 12, 30, 100, 1000)
    runs = tmp_path / "runs"
    for budget in budgets:
        for seed in range(2):
            amount = 1 / budget ** 0.5 + 0.01 * seed
            make_run(runs / "a", "digits", method="de", seed=seed, budget=budget, amount=amount, config={"members": 2})
            make_run(runs / "b", "digits", method="de", seed=seed, budget=budget, amount=amount, config={"members": 3})
            make_run(runs / "c", "toy-gap", method="sgd", seed=seed, budget=budget, amount=amount, label="tuned")
    from leaderboard.submission import run_folders, score_run

    with Store(tmp_path / "db.sqlite") as db:
        db.insert([score_run(folder, "alice", "a note") for folder in run_folders([runs])])
        page = tmp_path / "page.html"
        page.write_text(html_page(ranking.tracks(db.runs())))
    browser.load(page.as_uri())
    assert browser.problems() == []
    ticks = browser.evaluate("[...document.querySelectorAll('svg')].filter(s => s.getAttribute('aria-label')"
                             ".includes('against budget')).map(s => [...s.querySelectorAll('text.tick[text-anchor="
                             "middle]')].map(t => t.textContent))")
    assert len(ticks) == 3 and all(labels == [str(b) for b in budgets] for labels in ticks)
    assert browser.evaluate(OVERLAPPING_X_TICK_LABELS) == []
    text = browser.evaluate("document.body.innerText")
    assert "sgd (tuned)" in text and "what each configuration changes from its method's defaults" in text
    assert "members = 3 (default 5)" in text and "a note" in text


def test_the_browser_check_sees_errors_and_requests(browser, tmp_path):
    """The same check on a broken page reports its console error, exception and outside request."""
    page = tmp_path / "broken.html"
    page.write_text("<html><body><img src='http://example.invalid/x.png'>"
                    "<script>console.error('boom'); undefined_function();</script></body></html>")
    browser.load(page.as_uri())
    problems = browser.problems()
    assert any("boom" in p for p in problems)
    assert any(p.startswith("exception") for p in problems)
    assert any("example.invalid" in p for p in problems)


def _png_pixels(png: bytes) -> set[tuple[int, int, int]]:
    """The colours of an 8-bit, non-interlaced RGB or RGBA PNG (what Chromium's screenshots are), decoded here: the
    chunks' IDAT data inflated, each row's filter undone (PNG specification, section 9)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    position, data = 8, b""
    while position < len(png):
        length = int.from_bytes(png[position:position + 4], "big")
        kind, body = png[position + 4:position + 8], png[position + 8:position + 8 + length]
        position += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0
        elif kind == b"IDAT":
            data += body
    raw, size = zlib.decompress(data), {2: 3, 6: 4}[colour]
    stride, previous, colours = width * size, bytearray(width * size), set()
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - size] if i >= size else 0
            up, corner = previous[i], previous[i - size] if i >= size else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                guess = left + up - corner
                near = min((abs(guess - left), 0, left), (abs(guess - up), 1, up), (abs(guess - corner), 2, corner))
                line[i] = (line[i] + near[2]) & 255
        colours.update(tuple(line[i:i + 3]) for i in range(0, stride, size))
        previous = line
    return colours


EVIDENCE = Path(__file__).parent / "evidence" / "board-chart.png"
"""A screenshot this test took, kept as evidence of what the chart looks like (copied from the test's folder,
``agreement-chart.png``, after a run: ``pytest --basetemp``); the test holds it to the chart it draws now."""

LEGEND = """[...[...document.querySelectorAll('svg')].find(s => s.getAttribute('aria-label').includes(
  'agreement against budget')).querySelectorAll('text.legend')].map(text => {
    const marker = text.previousElementSibling;
    const line = marker.tagName === 'line' ? marker : marker.previousElementSibling;
    return [text.querySelector('title').textContent, line.getAttribute('stroke'), marker.tagName,
            marker.getAttribute('points'), getComputedStyle(text).fontWeight,
            getComputedStyle(line).strokeWidth]; })"""
OWN_ROWS = """[...document.querySelectorAll('tbody tr')].filter(tr => tr.cells[1] && tr.cells[1].textContent.trim()
  .startsWith('method-')).map(tr => [tr.cells[1].textContent.trim(), getComputedStyle(tr.cells[1]).fontWeight,
  getComputedStyle(tr.cells[1]).backgroundColor])"""
WRAPPED_CELLS = """[...document.querySelectorAll('td')].filter(td => td.textContent.trim()).filter(td => {
  const range = document.createRange(); range.selectNodeContents(td);
  return new Set([...range.getClientRects()].map(r => Math.round(r.top))).size > 1; }).map(td => td.textContent)"""


def _shape(tag: str, points: str | None) -> tuple:
    """A marker's shape: its polygon's corners relative to its first, or its tag (a circle, or none)."""
    if not points:
        return (tag,)
    corners = [tuple(map(float, point.split(","))) for point in points.split()]
    return tuple((round(x - corners[0][0], 1), round(y - corners[0][1], 1)) for x, y in corners[1:])


def test_the_page_looks_right_in_a_screenshot(browser, tmp_path):
    """Fifteen methods on a task, one far off, one the user's own among shipped ones: in a screenshot of its agreement
    chart every colour of the colour-blind-safe palette shows, each series has a colour and marker pair of its own,
    the user's is drawn thicker with a bold legend entry and set in bold on a tinted row, the far method is an arrow
    inside the plot's frame (not an axis pulled down to it), only the noise-floor rows are set in italics, every
    interval of a bounded metric stays in [0, 1], and no table cell (a ``mean ± half-width``, a name) wraps on a page
    700 pixels wide.
    The screenshot is written to the test's folder, and the one kept in tests/leaderboard/evidence is of this chart."""
    from leaderboard import svg
    from leaderboard.store import RunRow

    def rows(method, task, agreement, source="shipped"):
        return [RunRow(task=task, task_version=1, task_fingerprint="f", task_kind="classification", method=method,
                       budget=float(budget), seed=seed, reference_sha256="r", config_hash="c", config={},
                       source=source, predictions_sha256=f"p{seed}", epochs_used=float(budget), test_passes=1.0,
                       wall_seconds=1.0, device="cpu", versions={},
                       noise_floor={"all": {"agreement": 0.997, "total_variation": 0.007}}, reliability=None,
                       submitter="a", notes="", finished_at=None, submitted_at="now",
                       metrics={"all": {"agreement": min(1.0, agreement + 0.004 * seed + 0.01 * (budget == 100)),
                                        "total_variation": 1 - agreement}})
                for budget in (10, 100) for seed in range(3)]

    board = [row for index in range(14) for task in ("digits", "digits-cnn")
             for row in rows(f"method-{index:02d}", task, 0.95 + 0.002 * index, "run" if index == 3 else "shipped")]
    board += rows("far-off", "digits", 0.5) + rows("far-off", "digits-cnn", 0.5)
    page = tmp_path / "page.html"
    page.write_text(html_page(ranking.tracks(board)))
    browser.call("Emulation.setDeviceMetricsOverride", session=True, width=1300, height=1000, deviceScaleFactor=1,
                 mobile=False)
    browser.load(page.as_uri())
    assert browser.problems() == []
    chart = browser.evaluate("(() => { const r = [...document.querySelectorAll('svg')].find(s => s.getAttribute("
                             "'aria-label').includes('agreement against budget')).getBoundingClientRect(); "
                             "return [r.x + window.scrollX, r.y + window.scrollY, r.width, r.height]; })()")
    shot = browser.call("Page.captureScreenshot", session=True, format="png", captureBeyondViewport=True,
                        clip={"x": chart[0], "y": chart[1], "width": chart[2], "height": chart[3], "scale": 1})
    png = base64.b64decode(shot["data"])
    (tmp_path / "agreement-chart.png").write_bytes(png)
    for image in (png, EVIDENCE.read_bytes()):
        colours = _png_pixels(image)
        missing = [c for c in svg.PALETTE if tuple(int(c[i:i + 2], 16) for i in (1, 3, 5)) not in colours]
        assert missing == [], f"palette colours not drawn: {missing}"
        assert _png_size(image) == _png_size(png), "the kept screenshot is of another chart: copy the new one"
    legend = browser.evaluate(LEGEND)
    looks = [(colour, _shape(tag, points)) for name, colour, tag, points, _, _ in legend if name != "HMC noise floor"]
    assert len(looks) == 15 and len(set(looks)) == 15, legend
    emphasised = {name: (int(weight), float(width.removesuffix("px"))) for name, _, _, _, weight, width in legend}
    assert emphasised.pop("method-03") == (700, svg.EMPHASIS_WIDTH)
    assert all(weight < 700 and width < svg.EMPHASIS_WIDTH for weight, width in emphasised.values())
    own_rows = browser.evaluate(OWN_ROWS)
    assert {(name, weight) for name, weight, _ in own_rows if name == "method-03"} == {("method-03", "700")}
    assert all(weight != "700" and colour == "rgba(0, 0, 0, 0)" for name, weight, colour in own_rows
               if name != "method-03") and any(colour != "rgba(0, 0, 0, 0)" for *_, colour in own_rows)
    inside = browser.evaluate("""[...document.querySelectorAll('svg polygon.off-scale')].map(arrow => {
        const frame = arrow.ownerSVGElement.querySelector('rect.frame').getBoundingClientRect();
        const box = arrow.getBoundingClientRect();
        return box.top >= frame.top - 1 && box.bottom <= frame.bottom + 1; })""")
    assert inside and all(inside), inside
    ticks = browser.evaluate("[...[...document.querySelectorAll('svg')].find(s => s.getAttribute('aria-label')"
                             ".includes('agreement against budget')).querySelectorAll('text.tick[text-anchor=end]')]"
                             ".map(t => t.textContent)")
    assert ticks and min(float(t) for t in ticks) > 0.9, f"the far method pulled the axis down: {ticks}"
    styles = browser.evaluate("[...document.querySelectorAll('tbody tr')].map(tr => [tr.textContent.includes("
                              "'HMC noise floor'), getComputedStyle(tr.cells[0]).fontStyle])")
    assert {(floor, style) for floor, style in styles} == {(True, "italic"), (False, "normal")}
    browser.call("Emulation.setDeviceMetricsOverride", session=True, width=700, height=1000, deviceScaleFactor=1,
                 mobile=False)
    assert browser.evaluate("document.querySelectorAll('td').length") > 100
    assert browser.evaluate(WRAPPED_CELLS) == []


def _png_size(png: bytes) -> tuple[int, int]:
    """A PNG's width and height (its IHDR chunk)."""
    return struct.unpack(">II", png[16:24])
