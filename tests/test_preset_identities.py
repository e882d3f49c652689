"""Every preset's resolved values and run identities, pinned: a refactor of how presets are written (or of the
configs they hold) must leave what `get_preset(name)` returns, and so every stored run's identity, as it is.

A change here is a change of the preset's design (its stored runs are computed anew): make it on purpose and update
the pin in the same commit, saying why."""

from __future__ import annotations

import hashlib

import pytest

from esreason_lib.paper.studies.presets import PRESETS, get_preset
from esreason_lib.store.identity import canonical_json, config_hash

PINNED = {
    # name: (sha256[:16] of the whole preset's canonical JSON, execution settings kept; ES and GRPO config_hash)
    "frontier-clean": ("5ff9238483b7802f", "52ebe3b03f", "05f060251c"),
    "frontier-habit": ("2caa8114f70c18bf", "7ee81cface", "78a554f003"),
    "frontier-m": ("a0c83ab2bfb4dec4", "365bd84778", "8384d2a5c0"),
    "frontier-multi": ("fe49e3496ee7513b", "c0f2ccc406", "38008a2665"),
    "full": ("00a9e0006e4caf3a", "7c8832acc2", "073df19991"),
    "paper-easy": ("7b04b766e26eb01c", "b8df2e6455", "e5a40e83ec"),
    # added with issue 44.6: paper-easy on Qwen2.5-3B / 7B-Instruct, GRPO on TRL's engine (no stored runs yet)
    "paper-easy-3b": ("0e1ca35b6fcfe894", "f17673fc4e", "5ecb8df9f2"),
    "paper-easy-7b": ("ef47df63e9ac8f75", "8e5baf8d4c", "a90825b25e"),
    "paper-hard": ("b7bfee2fa36fa046", "226647773a", "5898daf0b2"),
    "powered": ("f858fd39e0627743", "7c8832acc2", "073df19991"),
    # added with issue 43 part B: the `pretrained` design's one setting; seeds 4-6, disjoint from the pilots'
    "pretrained-smollm2": ("b9ca94a4f09945e4", "f61f8314c1", "f0bae9a66a"),
    "smoke": ("acd55df674104e47", "9b4c819706", "0d0edffb7c"),
    "tiny": ("c0aaef3d73e50c27", "7c8832acc2", "95ead9794d"),
    "tiny-exact": ("e88569980151b161", "4db9049e85", "073df19991"),
}


def test_every_preset_is_pinned():
    assert sorted(PRESETS) == sorted(PINNED)


@pytest.mark.parametrize("name", sorted(PINNED))
def test_preset_values_and_run_identities_are_unchanged(name):
    preset = get_preset(name)
    whole = hashlib.sha256(canonical_json(preset, legacy=True).encode()).hexdigest()[:16]
    assert (whole, config_hash(preset.es), config_hash(preset.grpo)) == PINNED[name]


def test_the_pin_sees_a_changed_value():
    """The fingerprint moves with any one value, an execution setting included."""
    tiny = get_preset("tiny")
    fingerprints = {hashlib.sha256(canonical_json(p, legacy=True).encode()).hexdigest()[:16]
                    for p in (tiny, get_preset("tiny", **{"es.checkpoint_every": 7}),
                              get_preset("tiny", **{"scaling.eval.n_problems": 499}))}
    assert len(fingerprints) == 3
