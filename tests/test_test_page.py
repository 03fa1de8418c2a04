"""The built-in test page, driven in headless Chromium (Debian's chromium + chromedriver)."""

from __future__ import annotations

import json
import shutil
import time

import pytest
from live_server import Live
from support import SCRIPTED_TEXT

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER),
                                reason="needs Debian's chromium and chromium-driver (.ci/run installs them)")


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1000,900"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def _wait(driver, condition, timeout=60):
    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(condition)


def test_page_streams_a_reply(browser, tmp_path):
    live = Live(tmp_path, "tiny-scripted")
    try:
        browser.get(live.url + "/")
        _wait(browser, lambda d: d.find_element(By.ID, "status").text == "ok")
        assert "tiny-scripted" in browser.find_element(By.ID, "model").text
        prompt = browser.find_element(By.ID, "prompt")
        prompt.clear()
        prompt.send_keys("Who are you?")
        browser.find_element(By.ID, "temp").send_keys("0")
        browser.find_element(By.ID, "send").click()
        _wait(browser, lambda d: d.find_element(By.ID, "answer").text == SCRIPTED_TEXT)
        _wait(browser, lambda d: "17 tokens" in d.find_element(By.ID, "stats").text)
        assert browser.find_element(By.ID, "error").text == ""
        browser.save_screenshot(str(tmp_path / "page.png"))
    finally:
        live.close()


def test_page_json_schema_box(browser, tmp_path):
    live = Live(tmp_path, "tiny")
    try:
        browser.get(live.url + "/")
        _wait(browser, lambda d: d.find_element(By.ID, "status").text == "ok")
        browser.find_element(By.TAG_NAME, "summary").click()
        schema = browser.find_element(By.ID, "schema")
        schema.send_keys("{not json")
        browser.find_element(By.ID, "send").click()
        _wait(browser, lambda d: d.find_element(By.ID, "error").text.startswith("JSON schema:"))
        schema.clear()
        schema.send_keys('{"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9}}, '
                         '"required": ["n"], "additionalProperties": false}')
        browser.find_element(By.ID, "send").click()
        _wait(browser, lambda d: "tokens" in d.find_element(By.ID, "stats").text)
        answer = json.loads(browser.find_element(By.ID, "answer").text)
        assert set(answer) == {"n"} and 1 <= answer["n"] <= 9
        assert browser.find_element(By.ID, "error").text == ""
    finally:
        live.close()


def test_page_stop_button_cancels_the_generation(browser, tmp_path):
    live = Live(tmp_path, "tiny")
    try:
        browser.get(live.url + "/")
        _wait(browser, lambda d: d.find_element(By.ID, "status").text == "ok")
        max_tokens = browser.find_element(By.ID, "max")
        max_tokens.clear()
        max_tokens.send_keys("-1")
        browser.find_element(By.ID, "send").click()
        _wait(browser, lambda d: len(d.find_element(By.ID, "answer").text) > 20)
        assert live.engine.snapshot()["generation"]["state"] == "running"
        browser.find_element(By.ID, "stop").click()
        _wait(browser, lambda d: d.find_element(By.ID, "stats").text == "stopped")
        live.wait_idle()
        assert live.engine.last_result.finish_reason == "cancelled"
        assert browser.find_element(By.ID, "send").is_enabled()
        time.sleep(0.1)
        _wait(browser, lambda d: d.find_element(By.ID, "status").text == "ok")
    finally:
        live.close()


def test_page_shows_errors(browser, tmp_path):
    live = Live(tmp_path, "tiny-scripted", api_key="k")
    try:
        browser.get(live.url + "/")
        _wait(browser, lambda d: d.find_element(By.ID, "status").text == "ok")
        browser.find_element(By.ID, "send").click()
        _wait(browser, lambda d: "401" in d.find_element(By.ID, "error").text)
        browser.find_element(By.ID, "key").send_keys("k")
        browser.find_element(By.ID, "temp").send_keys("0")
        browser.find_element(By.ID, "send").click()
        _wait(browser, lambda d: d.find_element(By.ID, "answer").text == SCRIPTED_TEXT)
    finally:
        live.close()


OTHER_PAGE = """<!doctype html><title>other</title><pre id="out">waiting</pre><script>
fetch("API/v1/chat/completions", {method: "POST", headers: {"Content-Type": "application/json"},
  body: JSON.stringify({messages: [{role: "user", content: "hi"}], max_tokens: 3})})
  .then(r => r.json()).then(j => { document.getElementById("out").textContent = "answered " + j.object; })
  .catch(e => { document.getElementById("out").textContent = "blocked " + e.name; });
</script>"""


@pytest.fixture
def other_origin():
    """A page on a second loopback origin (another port) that calls the API."""
    import http.server
    import threading

    pages = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = pages["page"].encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield pages, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.mark.parametrize("allowed", [False, True])
def test_another_origin_is_blocked_unless_allowed(browser, tmp_path, other_origin, allowed):
    pages, origin = other_origin
    live = Live(tmp_path, "tiny", cors_origins=[origin] if allowed else [])
    try:
        pages["page"] = OTHER_PAGE.replace("API", live.url)
        browser.get(origin + "/")
        _wait(browser, lambda d: d.find_element(By.ID, "out").text != "waiting")
        text = browser.find_element(By.ID, "out").text
        assert text == ("answered chat.completion" if allowed else "blocked TypeError"), text
        if not allowed:  # nothing ran: the preflight was refused
            assert live.engine.last_result is None
    finally:
        live.close()
