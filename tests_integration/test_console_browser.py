"""The operator console in a real browser (Debian's Chromium, headless, driven by Selenium)
against a real `orderflow serve`: sign in, find a payment in doubt on the attention queue,
settle it at the simulated provider, reconcile from the order's page, watch it ship; a refused
action shows the API's problem detail. Screenshots are kept as artifacts.

Skipped, with the reason, only where no Chromium and chromedriver are installed (`.ci/run`
installs Debian's `chromium` and `chromium-driver` when they are missing).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from processes import (
    CUSTOMER_TOKEN,
    OPERATOR_TOKEN,
    Proc,
    base_env,
    eventually,
    free_port,
    http,
)

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
    pytest.skip(
        f"no {CHROMIUM} and {CHROMEDRIVER}: apt-get install chromium chromium-driver",
        allow_module_level=True,
    )
webdriver = pytest.importorskip("selenium.webdriver")

from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

pytestmark = pytest.mark.postgres
CUSTOMER = {"Authorization": f"Bearer {CUSTOMER_TOKEN}"}
OPERATOR = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
ORDER = {"items": [{"sku": "lamp", "quantity": 2, "unit_price_minor": 129900}], "currency": "RUB"}
# Where screenshots are copied besides the test's own folder (e.g. to refresh the README's).
ARTIFACTS = "ORDERFLOW_TEST_ARTIFACTS"


@pytest.fixture
def served(pg_url: str) -> Iterator[tuple[str, str, Proc]]:
    """`orderflow serve` on the test's database; the API's and the simulated services' URLs."""
    mocks_port = free_port()
    env = base_env(
        ORDERFLOW_DATABASE_URL=pg_url,
        ORDERFLOW_HTTP_PORT="0",
        ORDERFLOW_MOCKS_PORT=str(mocks_port),
        # Status checks give up within a second instead of fifteen.
        ORDERFLOW_RETRY_DELAYS_S="0.05,0.05,0.05,0.05",
        ORDERFLOW_POLL_INTERVAL_S="0.1",
        ORDERFLOW_LOG_FORMAT="json",
    )
    proc = Proc("serve", env)
    try:
        api = proc.wait_for(r"orderflow API: (http://\S+)/api/v1", timeout_s=120).group(1)
        eventually(lambda: http("GET", f"{api}/readyz")[0] == 200, what="/readyz")
        yield api, f"http://127.0.0.1:{mocks_port}", proc
    finally:
        proc.terminate()
        proc.close()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1440,1000",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    except Exception:
        driver.save_screenshot(str(tmp_path / "console-failure.png"))
        raise
    finally:
        driver.quit()


def _wait(driver: WebDriver, condition: Any, timeout_s: float = 30.0) -> Any:
    return WebDriverWait(driver, timeout_s, poll_frequency=0.1).until(condition)


def _click_fresh(driver: WebDriver, locator: tuple[str, str]) -> None:
    """Click what `locator` finds, found afresh until a click lands (a view that redraws as it
    polls may replace the element between finding and clicking it)."""

    def clicked(d: WebDriver) -> bool:
        try:
            d.find_element(*locator).click()
        except StaleElementReferenceException:
            return False
        return True

    _wait(driver, clicked)


def _screenshot(driver: WebDriver, tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    assert driver.save_screenshot(str(path)), f"no screenshot {name}"
    assert path.stat().st_size > 10_000, "the screenshot is (nearly) empty"
    if target := os.environ.get(ARTIFACTS):
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(target) / name)
    return path


def _order(api: str, order_id: str) -> dict[str, Any]:
    status, body = http("GET", f"{api}/api/v1/orders/{order_id}", **OPERATOR)
    assert status == 200, body
    return dict(body)


def _payment_in_doubt(api: str, mocks: str) -> str:
    """An order whose charge stays pending at the provider until the status checks give up."""
    script = {"service": "payments", "operation": "charge", "outcomes": ["pending"]}
    assert http("POST", f"{mocks}/_control/scripts", script)[0] == 201
    status, order = http(
        "POST", f"{api}/api/v1/orders", ORDER, **CUSTOMER, **{"Idempotency-Key": "e2e-1"}
    )
    assert status == 202, order
    order_id = str(order["order_id"])
    eventually(
        lambda: _order(api, order_id)["attention_reason"] == "reconcile_gave_up",
        timeout_s=60,
        what="the status checks to give up",
    )
    return order_id


def test_an_operator_reconciles_a_payment_in_doubt_from_the_console_and_it_ships(
    served: tuple[str, str, Proc], browser: WebDriver, tmp_path: Path
) -> None:
    api, mocks, proc = served
    order_id = _payment_in_doubt(api, mocks)
    assert _order(api, order_id)["state"] == "payment_unknown"
    warning = json.loads(proc.wait_for(rf'^{{.*"logger": "orderflow.attention".*{order_id}').string)
    assert warning["level"] == "WARNING"
    assert warning["order_id"] == order_id
    assert f"order {order_id} needs attention: reconcile_gave_up" in warning["message"]

    # The start banner says where the console is and where an operator token comes from.
    proc.wait_for(rf"^operator console: {re.escape(api)}/console ")
    proc.wait_for(r"^operator token: the value of ORDERFLOW_OPERATOR_TOKEN$")

    browser.get(api + "/")
    _wait(browser, ec.url_contains("/console"))
    # A customer's token is refused.
    token = _wait(browser, ec.visibility_of_element_located((By.ID, "token")))
    _the_signed_in_header_is_hidden(browser)
    token.send_keys(CUSTOMER_TOKEN)
    browser.find_element(By.ID, "sign-in-button").click()
    refused = _wait(browser, ec.visibility_of_element_located((By.ID, "sign-in-error")))
    assert "customer's token is refused" in refused.text
    assert browser.execute_script("return sessionStorage.length") == 0

    token.clear()
    token.send_keys(OPERATOR_TOKEN)
    browser.find_element(By.ID, "sign-in-button").click()
    # The queue redraws its rows as it polls: the row is found afresh on each poll (an element
    # held across a redraw is stale).
    queued = (By.CSS_SELECTOR, f'#queue tr[data-order-id="{order_id}"]')
    _wait(browser, ec.text_to_be_present_in_element(queued, "reconcile_gave_up"))
    _wait(browser, ec.text_to_be_present_in_element(queued, "payment_unknown"))
    counted = (By.CSS_SELECTOR, '[data-count="payment_unknown"]')
    _wait(browser, ec.text_to_be_present_in_element(counted, "1"))
    for signed_in in ("nav", "search"):
        assert browser.find_element(By.ID, signed_in).is_displayed(), signed_in
    _screenshot(browser, tmp_path, "console-queue.png")
    # The token lives in the tab's session storage only.
    assert browser.execute_script("return localStorage.length") == 0

    charge_key = _order(api, order_id)["payment"]["idempotency_key"]
    settle = {"idempotency_key": charge_key, "status": "succeeded"}
    assert http("POST", f"{mocks}/_control/payments/settle", settle)[0] == 200

    link = (By.XPATH, f'//*[@id="queue"]//tr[@data-order-id="{order_id}"]//a[.="{order_id}"]')
    _click_fresh(browser, link)
    _wait(browser, ec.visibility_of_element_located((By.ID, "order-attention")))
    timeline = browser.find_element(By.ID, "timeline").text
    assert "paying → payment_unknown" in timeline
    assert "step.failed: charge pending" in timeline
    # The status checks got "pending": their attempts say so, none claims to have succeeded.
    assert "reconcile_payment #1: pending" in timeline
    assert "reconcile_payment #1: succeeded" not in timeline
    _screenshot(browser, tmp_path, "console-waiting-order.png")
    _wait(browser, ec.element_to_be_clickable((By.ID, "action-reconcile"))).click()
    _wait(browser, ec.visibility_of_element_located((By.ID, "confirm-yes"))).click()
    _wait(browser, ec.text_to_be_present_in_element((By.ID, "order-state"), "shipped"), 60)
    assert _order(api, order_id)["state"] == "shipped"
    assert browser.find_elements(By.ID, "order-attention") == []

    # A refund above what was charged is refused: the page shows the API's problem detail.
    total = ORDER["items"][0]["quantity"] * ORDER["items"][0]["unit_price_minor"]  # type: ignore[index]
    _wait(browser, ec.visibility_of_element_located((By.ID, "refund-amount"))).send_keys(
        str(total + 1)
    )
    browser.find_element(By.ID, "refund-reason").send_keys("customer changed their mind")
    browser.find_element(By.ID, "action-refund").click()
    _wait(browser, ec.visibility_of_element_located((By.ID, "confirm-yes"))).click()
    problem = _wait(
        browser,
        ec.visibility_of_element_located(
            (By.CSS_SELECTOR, '#action-result .problem[data-code="validation_failed"]')
        ),
    )
    assert "amount_minor" in problem.text
    assert f"not above {total}" in problem.text
    assert _order(api, order_id)["refunds"] == []
    assert browser.find_element(By.ID, "refund-amount").get_attribute("value") == str(total + 1)
    _screenshot(browser, tmp_path, "console-order.png")
    _the_feed_shows_the_order_live(browser, order_id, tmp_path)
    browser.find_element(By.ID, "sign-out").click()
    _wait(browser, ec.visibility_of_element_located((By.ID, "sign-in")))
    _the_signed_in_header_is_hidden(browser)
    _the_api_reference_renders(browser, api, tmp_path)
    _logs_are_json_with_an_access_log_and_no_token(proc)


def _the_signed_in_header_is_hidden(browser: WebDriver) -> None:
    """Signed out, the header shows the brand only: no search, Queue, Events or Sign out."""
    for signed_in in ("nav", "search", "sign-out"):
        element = browser.find_element(By.ID, signed_in)
        assert element.get_attribute("hidden") is not None or signed_in == "sign-out"
        assert not element.is_displayed(), f"#{signed_in} shows while signed out"
    assert browser.find_element(By.CSS_SELECTOR, ".top .brand").is_displayed()


def _the_feed_shows_the_order_live(browser: WebDriver, order_id: str, tmp_path: Path) -> None:
    browser.find_element(By.LINK_TEXT, "Events").click()
    # The live feed redraws its rows as events arrive: the row is found afresh on each poll
    # (an element held across a redraw is stale), until it shows the order's reason.
    row = (
        By.XPATH,
        f'//table[@id="events"]//tr[td[2]="order.needs_attention"][.//a[.="{order_id}"]]',
    )
    _wait(browser, ec.text_to_be_present_in_element(row, "reconcile_gave_up"))
    shipped = (By.XPATH, f'//table[@id="events"]//tr[td[2]="order.shipped"]//a[.="{order_id}"]')
    _wait(browser, ec.visibility_of_element_located(shipped))
    _screenshot(browser, tmp_path, "console-events.png")


def _the_api_reference_renders(browser: WebDriver, api: str, tmp_path: Path) -> None:
    browser.get(api + "/api/v1/docs")
    listed = _wait(browser, ec.visibility_of_element_located((By.ID, "op-listOrders")))
    assert "needs_attention" in listed.get_attribute("textContent")
    assert browser.find_element(By.ID, "op-orderNeedsAttention")
    assert browser.find_element(By.ID, "schema-AttentionPayload")
    listed.click()
    _screenshot(browser, tmp_path, "api-docs.png")


def _logs_are_json_with_an_access_log_and_no_token(proc: Proc) -> None:
    """Every log line the server wrote is a JSON object; the browser's requests are in the
    access log under the operator's name; no token appears anywhere in the output."""
    proc.wait_for(r'"path": "/api/v1/orders/[^"]+/refunds", "status": 422')
    logged = [json.loads(line) for line in proc.lines if line.startswith("{")]
    access = [line for line in logged if line["logger"] == "orderflow.http.access"]
    assert {"method", "path", "status", "duration_ms", "user"} <= set(access[-1])
    assert any(line["user"] == "order_operator" for line in access)
    assert any(line["status"] == 403 and line["user"] == "order_customer" for line in access)
    for line in proc.lines:
        assert not re.match(r"^\d{4}-\d\d-\d\d .* (INFO|WARNING|ERROR) ", line), line
        assert OPERATOR_TOKEN not in line
        assert CUSTOMER_TOKEN not in line
