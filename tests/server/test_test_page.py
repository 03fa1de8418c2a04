"""The built-in test page, driven in headless Chromium (Debian's chromium + chromedriver)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from live_server import SHORT, Holder, Live
from support import SCRIPTED_TEXT

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER),
                                reason="needs Debian's chromium and chromium-driver (.ci/run installs them)")


#: phone and desktop widths (CSS pixels)
WIDTHS = {"phone": (390, 844), "desktop": (1200, 900)}
ARTIFACTS = os.environ.get("MNN_ENGINE_TEST_ARTIFACTS")


@pytest.fixture(scope="module", params=list(WIDTHS))
def browser(request):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    width, height = WIDTHS[request.param]
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 f"--window-size={width},{height}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.width_name = request.param
    yield driver
    driver.quit()


def _wait(driver, condition, timeout=60):
    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(condition)


def _shot(driver, tmp_path, name: str) -> None:
    """A screenshot per width, kept with the test's files (and in $MNN_ENGINE_TEST_ARTIFACTS)."""
    for folder in filter(None, (str(tmp_path), ARTIFACTS)):
        os.makedirs(folder, exist_ok=True)
        driver.save_screenshot(os.path.join(folder, f"page-{name}-{driver.width_name}.png"))


def _open(driver, live, clear: bool = True) -> None:
    driver.get(live.url + "/")
    if clear:
        driver.execute_script("localStorage.clear()")
        driver.get(live.url + "/")
    _wait(driver, lambda d: d.find_element(By.ID, "status").text == "ready")


def _settings(driver) -> None:
    if not driver.find_element(By.ID, "settings").is_displayed():
        driver.find_element(By.ID, "toggle-settings").click()


def _type(driver, text: str) -> None:
    prompt = driver.find_element(By.ID, "prompt")
    prompt.send_keys(text)
    driver.find_element(By.ID, "send").click()


def _messages(driver) -> list:
    """The conversation as drawn: class, text, and for answers their parts (read in one go: the page redraws)."""
    return driver.execute_script("""
        const text = (m, css) => m.querySelector(css) ? m.querySelector(css).textContent : null;
        return [...document.querySelectorAll('#messages .msg')].map((m) => ({
          cls: m.className, text: m.textContent, body: text(m, '.body'), stats: text(m, '.stats'),
          reasoning: text(m, 'details.reasoning .text'),
          reasoning_open: m.querySelector('details.reasoning')?.open ?? null}));""")


def _last_done(driver) -> dict:
    """The last answer, once its stats line is there."""
    def done(d):
        messages = _messages(d)
        return messages and messages[-1]["cls"] == "msg assistant" and messages[-1]["stats"] and messages[-1]
    return _wait(driver, done)


def _errors(driver) -> list:
    return [m["text"] for m in _messages(driver) if m["cls"] == "msg error"]


def test_multi_turn_regenerate_new_chat_and_history(browser, tmp_path):
    live = Live(tmp_path, "tiny-scripted")
    try:
        _open(browser, live)
        _settings(browser)
        browser.find_element(By.ID, "temp").send_keys("0")
        _type(browser, "Who are you?")
        answer = _last_done(browser)
        assert answer["body"] == SCRIPTED_TEXT
        assert "17 tokens" in answer["stats"] and "tok/s" in answer["stats"]
        _type(browser, "And again?")
        _wait(browser, lambda d: len(_messages(d)) == 4 and "tokens" in _last_done(d)["stats"])
        assert live.engine.last_result.prompt_tokens > 20  # the whole conversation was sent
        assert [m["cls"] for m in _messages(browser)] == ["msg user", "msg assistant"] * 2
        browser.find_element(By.CSS_SELECTOR, ".regenerate").click()
        _wait(browser, lambda d: d.find_element(By.ID, "send").is_enabled() and len(_messages(d)) == 4
              and "tokens" in _last_done(d)["stats"])
        assert len(browser.find_elements(By.CSS_SELECTOR, ".regenerate")) == 1  # only on the last answer
        _shot(browser, tmp_path, "conversation")
        browser.refresh()  # the conversation is kept in the browser
        _wait(browser, lambda d: len(_messages(d)) == 4)
        browser.find_element(By.ID, "new-chat").click()
        assert _messages(browser) == []
    finally:
        live.close()


def test_hostile_output_is_shown_as_text(browser, tmp_path):
    live = Live(tmp_path, "tiny")
    try:
        _open(browser, live)
        hostile = ('<img src=x onerror="window.pwned=1"> <script>window.pwned=2</script> '
                   '[link](javascript:alert(1)) **bold** `code`\n\n```html\n<b>not bold</b>\n```\n\n- one\n- two')
        browser.execute_script(
            "localStorage.setItem('mnn-engine-chat', JSON.stringify(["
            "{role: 'user', content: '<i>me</i>'}, {role: 'assistant', content: arguments[0], done: true}]))",
            hostile.replace("\\n", "\n"))
        browser.get(live.url + "/")
        _wait(browser, lambda d: len(_messages(d)) == 2)
        box = browser.find_element(By.ID, "messages")
        assert box.find_elements(By.TAG_NAME, "img") == [] and box.find_elements(By.TAG_NAME, "script") == []
        assert box.find_elements(By.TAG_NAME, "i") == [] and box.find_elements(By.TAG_NAME, "a") == []
        assert browser.execute_script("return window.pwned") is None
        body = browser.find_elements(By.CSS_SELECTOR, "#messages .msg .body")[0]
        assert '<img src=x onerror="window.pwned=1">' in body.text and "<b>not bold</b>" in body.text
        assert body.find_element(By.TAG_NAME, "strong").text == "bold"
        assert body.find_element(By.CSS_SELECTOR, "pre code").text == "<b>not bold</b>"
        assert [li.text for li in body.find_elements(By.TAG_NAME, "li")] == ["one", "two"]
        assert _messages(browser)[0]["text"] == "<i>me</i>"
        _shot(browser, tmp_path, "hostile")
    finally:
        live.close()


def test_thinking_is_offered_and_shown_only_for_models_that_think(browser, tmp_path):
    live = Live(tmp_path / "a", "tiny-thinking")
    try:
        _open(browser, live)
        _settings(browser)
        assert browser.find_element(By.ID, "think-label").is_displayed()
        assert browser.find_element(By.ID, "think").is_selected()  # the model's own default: on
        browser.find_element(By.ID, "temp").send_keys("0")
        _type(browser, "Hi")
        answer = _last_done(browser)
        assert answer["reasoning_open"] is False  # folded once the answer is complete
        assert "The user greets me." in answer["reasoning"]
        assert answer["body"] == "Hello there!"
        browser.find_element(By.CSS_SELECTOR, "details.reasoning summary").click()
        _shot(browser, tmp_path, "thinking")
    finally:
        live.close()
    live = Live(tmp_path / "b", "smollm2-135m")  # a template without <think>
    try:
        _open(browser, live)
        _settings(browser)
        assert not browser.find_element(By.ID, "think-label").is_displayed()
    finally:
        live.close()


def test_stop_leaves_the_server_ready_before_send_comes_back(browser, tmp_path):
    live = Live(tmp_path, "tiny")
    try:
        _open(browser, live)
        _settings(browser)
        max_tokens = browser.find_element(By.ID, "max")
        max_tokens.clear()
        max_tokens.send_keys("-1")
        _type(browser, "Tell me a long story.")
        _wait(browser, lambda d: len(_messages(d)[-1]["text"]) > 20)
        _wait(browser, lambda d: d.find_element(By.ID, "status").text == "generating")  # pushed by /events
        browser.find_element(By.ID, "stop").click()
        _wait(browser, lambda d: d.find_element(By.ID, "send").is_enabled())
        assert live.engine.snapshot()["generation"]["state"] == "idle"
        assert live.engine.last_result.finish_reason == "cancelled"
        assert _last_done(browser)["stats"] == "stopped"
        max_tokens.clear()
        max_tokens.send_keys("4")
        _type(browser, "Again")  # at once: no 429
        _wait(browser, lambda d: len(_messages(d)) == 4 and "tokens" in _last_done(d)["stats"])
        assert not _errors(browser)
    finally:
        live.close()


def test_errors_401_429_503_are_shown(browser, tmp_path):
    live = Live(tmp_path / "a", "tiny-scripted", api_key="k")
    try:
        _open(browser, live)
        _type(browser, "Hi")
        _wait(browser, _errors)
        assert _errors(browser)[0].startswith("401: unauthorized")
        _shot(browser, tmp_path, "error-401")
        _settings(browser)
        browser.find_element(By.ID, "key").send_keys("k")
        browser.find_element(By.ID, "temp").send_keys("0")
        browser.find_element(By.ID, "prompt").click()  # the key field's change event
        _type(browser, "Hi")
        assert _last_done(browser)["body"] == SCRIPTED_TEXT
        assert not _errors(browser)  # the failed attempt is gone
    finally:
        live.close()
    live = Live(tmp_path / "b", "tiny", queue=1)
    try:
        _open(browser, live)
        holder = Holder(live)
        _type(browser, "Hi")  # waits in the queue
        _wait(browser, lambda d: json.loads(live.request("GET", "/health")[2])["queue"]["waiting"] == 1)
        assert live.request("POST", "/v1/chat/completions", json.dumps(SHORT))[0] == 429  # the queue is full
        live.engine.stop_server()
        _wait(browser, _errors)
        assert _errors(browser)[0].startswith("503: server_stopping")
        holder.conn.close()
    finally:
        live.close()
    live = Live(tmp_path / "c", "tiny", queue=0)
    try:
        _open(browser, live)
        holder = Holder(live)
        _type(browser, "Hi")
        _wait(browser, _errors)
        assert _errors(browser)[0].startswith("429: busy")
        holder.release()
        _type(browser, "Hi")  # an error is not part of the conversation sent
        _wait(browser, lambda d: "tokens" in _last_done(d)["stats"])
    finally:
        live.close()


def test_page_json_schema_box(browser, tmp_path):
    live = Live(tmp_path, "tiny")
    try:
        _open(browser, live)
        _settings(browser)
        browser.find_element(By.CSS_SELECTOR, "#structured summary").click()
        schema = browser.find_element(By.ID, "schema")
        schema.send_keys("{not json")
        _type(browser, "Hi")
        _wait(browser, _errors)
        assert _errors(browser)[0].startswith("JSON schema:")
        schema.clear()
        schema.send_keys('{"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9}}, '
                         '"required": ["n"], "additionalProperties": false}')
        _type(browser, "Hi")
        answer = json.loads(_last_done(browser)["body"])
        assert set(answer) == {"n"} and 1 <= answer["n"] <= 9
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
