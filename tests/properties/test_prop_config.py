"""Every key of the typed config, attacked from its own declaration (``declarations.config_keys``): its bounds and
just past them, huge and non-finite numbers, wrong types, YAML syntax and bytes that are not UTF-8 in text.

The invariants: a refused value is one ``ConfigError`` line naming the key (and the file, where a file set it);
an accepted value lies inside the key's declaration (a finite range, its choices); a text key takes the command
line's text literally; a value the config accepts, the design space draws and the genome reader takes back.
"""

import mujoco
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from derl.checked_config import load_config
from derl.config import ConfigError
from derl.morphology import Genome, GenomeError, mutate, random_genome, to_mjcf
from tests.properties.declarations import config_keys, examples, numbers, override_texts, within_declaration

pytestmark = pytest.mark.fuzz

KEYS = [key for key in config_keys() if not key.derived]
DERIVED = [key for key in config_keys() if key.derived]


def _refusal(err: ConfigError, key_name: str, source: str | None = None) -> None:
    message = str(err)
    assert "\n" not in message, message
    assert key_name in message or key_name in err.keys, (key_name, message)
    if source is not None:
        assert source in message, (source, message)


@pytest.mark.parametrize("key", KEYS, ids=[key.name for key in KEYS])
@settings(max_examples=examples(6, 1 / 20))
@given(data=st.data())
def test_a_value_on_the_command_line_is_refused_naming_its_key_or_kept_within_its_declaration(key, data):
    text = data.draw(override_texts(key), label="text")
    try:
        cfg = load_config(None, [key.name, text])
    except ConfigError as err:
        _refusal(err, key.name)
        return
    value = cfg.get_path(key.name)
    assert (problem := within_declaration(key, value)) is None, f"{key.name} {text!r}: {problem}"
    if key.text:
        assert value == text, f"{key.name} {text!r} was read as {value!r}: a text key takes the text"


@pytest.mark.parametrize("key", KEYS, ids=[key.name for key in KEYS])
@settings(max_examples=examples(2, 1 / 200))
@given(data=st.data())
def test_a_value_in_a_config_file_is_refused_naming_the_file_and_key_or_kept_within_its_declaration(key, data,
                                                                                                     tmp_path):
    text = data.draw(override_texts(key), label="text")
    path = tmp_path / "hostile.yml"
    nested = key.name.split(".")
    lines = [f"{'  ' * depth}{part}:" for depth, part in enumerate(nested[:-1])]
    try:
        path.write_text("\n".join([*lines, f"{'  ' * (len(nested) - 1)}{nested[-1]}: {text}"]) + "\n",
                        errors="surrogateescape")
    except UnicodeEncodeError:
        return  # a lone surrogate that is no escaped byte: no file holds it
    try:
        cfg = load_config(path)
    except ConfigError as err:
        assert "\n" not in str(err) and str(path) in str(err), str(err)
        return
    value = cfg.get_path(key.name)
    assert (problem := within_declaration(key, value)) is None, f"{key.name}: {text!r} in a file: {problem}"


@pytest.mark.parametrize("key", DERIVED, ids=[key.name for key in DERIVED])
def test_a_derived_key_set_by_hand_is_refused_naming_it(key):
    with pytest.raises(ConfigError) as caught:
        load_config(None, [key.name, "1"])
    _refusal(caught.value, key.name)


# The keys the design space is drawn from and built with (``Config.unimal``): a span at its declared ends or past
# them, any other value as the command line may give it.
DESIGN_KEYS = [key for key in KEYS if key.section in ("XML", "BODY", "TORSO", "LIMB") and not key.text]


@st.composite
def design_overrides(draw) -> list[str]:
    """Overrides of one to three design-space keys; a span a single value or a ``[start, stop, step]``."""
    chosen = draw(st.lists(st.sampled_from(DESIGN_KEYS), min_size=1, max_size=3, unique_by=lambda key: key.name))
    overrides = []
    for key in chosen:
        number = numbers(key)
        if not key.span:
            value = draw(override_texts(key))
        elif draw(st.booleans()):
            value = f"[{draw(number)!r}]"
        else:
            low, high = sorted([draw(number), draw(number)])
            value = f"[{low!r}, {high!r}, {draw(number)!r}]"
        overrides += [key.name, value]
    return overrides


@settings(max_examples=examples(20, 1 / 4))
@given(overrides=design_overrides(), seed=st.integers(0, 2**32 - 1))
def test_what_the_config_lets_the_design_space_draw_the_genome_reader_accepts(overrides, seed):
    """A body drawn or mutated under an accepted config is read back by ``Genome.from_json`` of that config and
    compiles in MuJoCo: never a search that trains a body, refuses its genome on read-back and makes it anew for
    ever, nor a config fault found as a body's failure. A space that cannot grow its bodies is refused at the
    first draw, one line naming the keys."""
    try:
        cfg = load_config(None, overrides)
    except ConfigError as err:
        assert "\n" not in str(err) and any(name in str(err) for name in overrides[::2]), (overrides, str(err))
        return
    rng = np.random.default_rng(seed)
    try:
        genome = random_genome(cfg.unimal, rng, "000000")
    except ConfigError as err:  # a design space that cannot grow its bodies: refused at the first draw
        assert "\n" not in str(err) and set(err.keys) & set(overrides[::2]), (overrides, str(err))
        return
    for generation in range(3):
        try:
            Genome.from_json(genome.to_json(), cfg.unimal)
        except GenomeError as err:
            raise AssertionError(f"{overrides}: drawn, then refused on read-back: {err}") from None
        try:
            mujoco.MjModel.from_xml_string(to_mjcf(genome, cfg.unimal))
        except ValueError as err:
            raise AssertionError(f"{overrides}: drawn, then MuJoCo refused it: {str(err).splitlines()[0]}") from None
        try:
            genome = mutate(genome, cfg.unimal, rng, f"00000{generation + 1}")
        except ValueError:  # no operator applies: nothing more to draw
            break
