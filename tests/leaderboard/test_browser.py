"""The HTML page in a real headless Chromium: it loads without console errors or network requests and shows
the tables and plots. Chromium is driven over its own DevTools pipe (``--remote-debugging-pipe``: JSON
messages separated by NUL bytes on file descriptors 3 and 4), so no driver package is needed; without a
Chromium installed the tests skip."""

import json
import os
import shutil
import subprocess
import time

import pytest

from leaderboard import ranking
from leaderboard.render import html_page
from leaderboard.store import Store

BROWSER = next((path for path in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if path), None)
BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BROWSER is None or BASH is None,
                                reason="no Chromium (apt-get install chromium) or no bash to start it with")
LOAD_TIMEOUT_SECONDS = 30


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
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session=True)

    def call(self, method, session=False, **params):
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self._session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._receive()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def _receive(self, deadline=None):
        while b"\0" not in self._buffer:
            if deadline is not None and time.monotonic() > deadline:
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
        self._process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)


@pytest.fixture
def browser(tmp_path):
    devtools = DevTools(tmp_path / "profile")
    yield devtools
    devtools.close()


def test_page_loads_cleanly_and_shows_tables_and_plots(browser, tmp_path, make_run):
    runs = tmp_path / "runs"
    for budget in (10, 100):
        for seed in range(2):
            make_run(runs, "digits", method="de", seed=seed, budget=budget, amount=2 / budget + 0.01 * seed)
            make_run(runs, "toy-gap", method="sae", seed=seed, budget=budget, amount=2 / budget + 0.01 * seed)
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
            make_run(runs / "a", "digits", method="de", seed=seed, budget=budget, amount=amount)
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
