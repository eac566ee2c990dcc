"""The exception hierarchy and its binding-facing constructor."""

from __future__ import annotations

import pickle

import pytest

import eddyline as ed


@pytest.mark.parametrize(
    "cls",
    [ed.ScopeError, ed.SchemaError, ed.CheckpointError, ed.JobFailedError, ed.GraphError],
)
def test_errors_subclass_eddyline_error(cls: type[ed.EddylineError]) -> None:
    assert issubclass(cls, ed.EddylineError)
    assert issubclass(cls, Exception)
    err = cls("operator 'x' failed", operator="x", user_traceback="Traceback ...")
    assert str(err) == "operator 'x' failed"
    assert err.operator == "x"
    assert err.user_traceback == "Traceback ..."
    assert err.message == "operator 'x' failed"


def test_error_attributes_default_to_none() -> None:
    err = ed.EddylineError("boom")
    assert err.operator is None
    assert err.user_traceback is None


def test_error_keyword_arguments_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        ed.SchemaError("m", "op")  # type: ignore[misc]


def test_errors_pickle_with_attributes() -> None:
    err = ed.JobFailedError("operator 'm' failed", operator="m", user_traceback="tb")
    copy = pickle.loads(pickle.dumps(err))
    assert type(copy) is ed.JobFailedError
    assert (str(copy), copy.operator, copy.user_traceback) == (str(err), "m", "tb")


def test_errors_match_by_message() -> None:
    with pytest.raises(ed.SchemaError, match="operator 'parse'"):
        raise ed.SchemaError("operator 'parse' returned a str", operator="parse")
