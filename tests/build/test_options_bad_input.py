"""A build's config settings are checked before anything runs: a remote cache URL given as
``-C r1build.remote-cache`` that is no URL is refused naming that setting (it was once taken as it was, and
refused later as ``--remote-cache``, a flag the person building never gave)."""

from __future__ import annotations

import pytest

from r1build.build.options import split_settings
from r1build.errors import ConfigError


@pytest.mark.parametrize("url", ["ftp://x", "not a url", "http://u:p@host/", "s3://"])
def test_a_bad_remote_cache_setting_names_the_setting(url: str) -> None:
    with pytest.raises(ConfigError, match=r"^r1build\.remote-cache: ") as info:
        split_settings({"r1build.remote-cache": url}, {})
    assert info.value.exit_code == 2


def test_a_good_remote_cache_setting_is_kept() -> None:
    options, rest = split_settings({"r1build.remote-cache": "https://cache.example.org/team"}, {})
    assert options.remote_cache == "https://cache.example.org/team" and rest == {}
