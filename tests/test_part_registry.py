"""The one registry of named parts (:class:`itrlab.registry.Registry`), and the contract every registered dataset
kind, stored feature, raw format, extraction step and scheme keeps (methods and losses have their own suite:
tests/test_method_contract.py). The parts are read from their registries when the tests are collected, so a part
registered later is covered without editing this file."""

from __future__ import annotations

import sys

import pytest

from conftest import REPO
from itrlab.assembly import load_experiment
from itrlab.config.schema import Section
from itrlab.data.kinds import DATASET_KINDS, STORED_FEATURES, DatasetKind, StoredFeatures, kind_of
from itrlab.errors import UserInputError
from itrlab.extract.readers import READERS, Reader, reader_of
from itrlab.extract.steps import STEPS, Step
from itrlab.methods.registry import PAPERS, SCHEMES
from itrlab.registry import Registry

# what each kind of part must define itself: the base's methods that only raise NotImplementedError
OWN = {
    "dataset kind": (DATASET_KINDS, DatasetKind, ("summary", "shape", "open_split")),
    "stored features": (STORED_FEATURES, StoredFeatures, ("wanted", "check")),
    "format": (READERS, Reader, ("read", "images_of")),
    "extraction step": (STEPS, Step, ("add_arguments", "options", "run", "work_dir", "written")),
}
PARTS = [(kind, name) for kind, (registry, _, _) in OWN.items() for name in registry]


def test_a_declared_part_is_known_before_its_module_is_imported_and_registered_when_looked_up(tmp_path, monkeypatch):
    module = "itrlab_test_declared_part"
    (tmp_path / f"{module}.py").write_text(
        "from test_part_registry import WIDGETS\n\n@WIDGETS.register('round')\nclass Round:\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    WIDGETS.declare(module, "round")
    assert "round" in WIDGETS and list(WIDGETS) == ["round"] and module not in sys.modules
    assert WIDGETS["round"].name == "round" and module in sys.modules and len(WIDGETS) == 1
    with pytest.raises(ValueError, match="widget 'round' is declared twice"):
        WIDGETS.declare(module, "round")


WIDGETS: Registry[type] = Registry("widget")


def test_a_name_is_registered_once_and_only_by_the_module_that_declared_it():
    registry: Registry[object] = Registry("gadget")
    registry.add("a", 1)
    with pytest.raises(ValueError, match="gadget 'a' is registered twice"):
        registry.add("a", 2)
    registry.declare("itrlab.somewhere_else", "b")

    class B:
        pass

    with pytest.raises(ValueError, match=r"gadget 'b' is registered twice \(itrlab.somewhere_else registers it\)"):
        registry.register("b")(B)
    assert registry["a"] == 1 and "b" in registry and "c" not in registry


def test_an_unknown_name_says_what_is_known_and_the_closest():
    registry: Registry[int] = Registry("colour")
    for i, name in enumerate(("red", "green", "blue")):
        registry.add(name, i)
    assert registry.unknown("gren") == "known colours: blue, green, red (did you mean 'green'?)"
    assert registry.unknown("x") == "known colours: blue, green, red"
    with pytest.raises(KeyError):
        registry["x"]
    with pytest.raises(UserInputError, match=r"^--colour: got 'gren'; known colours: .*'green'"):
        registry.lookup("gren", lambda text: UserInputError(f"--colour: {text}"))
    assert registry.lookup("blue") == 2


def test_an_unknown_format_is_one_line_naming_the_formats():
    with pytest.raises(UserInputError, match=r"^--format: got 'flickr'; known formats: .*flickr8k.*did you mean"):
        reader_of("flickr")


@pytest.mark.parametrize("kind, name", PARTS, ids=[f"{kind}:{name}" for kind, name in PARTS])
def test_every_registered_part_defines_what_its_base_leaves_open_and_carries_its_name(kind, name):
    registry, base, own = OWN[kind]
    cls = registry[name]
    assert issubclass(cls, base) and cls.name == name
    left = [method for method in own if getattr(cls, method) is getattr(base, method)]
    assert not left, f"{kind} {name!r} does not define {left}"


def scheme_settings(section: str) -> Section:
    """The settings of ``section`` as the first tiny experiment that sets it writes them."""
    for path in sorted((REPO / "configs" / "experiments").glob("*_synthetic_tiny.yaml")):
        found = getattr(load_experiment(path.stem, ["tracking.enabled=false"]), section, None)
        if found is not None:
            return found
    raise AssertionError(f"no tiny experiment sets the scheme's section {section!r}: add one")


@pytest.mark.parametrize("section", sorted(SCHEMES))
def test_every_scheme_types_its_section_and_says_it_on_one_line(section):
    scheme = SCHEMES[section]
    settings = scheme_settings(section)
    assert scheme.section == section and issubclass(scheme.settings, Section) and isinstance(settings, scheme.settings)
    line = scheme.describe(settings)
    assert isinstance(line, str) and line and "\n" not in line
    assert isinstance(scheme.fresh(settings), scheme.settings)
    assert scheme.structure(settings) is None or isinstance(scheme.structure(settings), str)


def test_every_paper_has_a_page_of_the_manual():
    assert PAPERS and all((REPO / paper.page.split("#")[0]).is_file() for paper in PAPERS.values())


# each dataset kind on the tiny synthetic data: generated by the synthetic kind, read as stored by the precomp kind
KIND_OVERRIDES = {"synthetic": [], "precomp": ["defaults.dataset=f30k_precomp"]}


def test_every_dataset_kind_has_a_tiny_case():
    assert set(KIND_OVERRIDES) == set(DATASET_KINDS), "give a new dataset kind its case in KIND_OVERRIDES"


@pytest.mark.parametrize("name", sorted(KIND_OVERRIDES))
def test_every_dataset_kind_reads_the_tiny_data_as_a_run_reads_it(name, tiny_root):
    kind_of(load_experiment("vsepp_synthetic_tiny", [f"dataset.root={tiny_root}"]).dataset).prepare()
    config = load_experiment("vsepp_synthetic_tiny", [*KIND_OVERRIDES[name], f"dataset.root={tiny_root}"])
    kind = kind_of(config.dataset)
    summary, (regions, width) = kind.summary(), kind.shape()
    test = kind.open_split("test")
    assert kind.name == name and kind.on_disk() and summary.captions_per_image == test.captions_per_image == 5
    assert test.features.shape[1:] == (regions, width) and len(test.captions) == 5 * test.features.shape[0]
