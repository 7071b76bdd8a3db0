"""The version new orders get is one whose step kinds' services are all configured: what each
version needs is read from its kinds' definitions (`services_needed`), not named per kind."""

from __future__ import annotations

import pytest

from orderflow.config import ConfigError, load_settings
from orderflow_core.process import NEWEST
from orderflow_core.steps.registry import services_needed

EXTERNAL = {
    "ORDERFLOW_WAREHOUSE_URL": "http://warehouse.test",
    "ORDERFLOW_PAYMENTS_URL": "http://payments.test",
    "ORDERFLOW_SHIPPING_URL": "http://shipping.test",
}


def test_each_version_needs_the_services_its_step_kinds_call() -> None:
    assert services_needed(1) == {"warehouse", "payments", "shipping"}
    assert services_needed(2) == {"warehouse", "payments", "shipping", "notifications"}


def test_with_the_simulated_services_the_newest_version_is_served() -> None:
    assert load_settings({}).process_version == NEWEST == 2


def test_without_a_notification_service_the_newest_version_that_needs_none_is_served() -> None:
    assert load_settings(EXTERNAL).process_version == 1
    notifying = {**EXTERNAL, "ORDERFLOW_NOTIFICATIONS_URL": "http://notify.test"}
    assert load_settings(notifying).process_version == 2


def test_asking_for_a_version_whose_service_is_missing_stops_start_up() -> None:
    with pytest.raises(ConfigError, match="needs ORDERFLOW_NOTIFICATIONS_URL"):
        load_settings({**EXTERNAL, "ORDERFLOW_PROCESS_VERSION": "2"})
