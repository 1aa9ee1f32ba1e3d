"""Label selector grammar and matching, against apimachinery's behaviour."""

from __future__ import annotations

import pytest

from xds_client.store import Requirement, SelectorError, matches, parse_selector

R = Requirement

VALID: list[tuple[str, tuple[Requirement, ...]]] = [
    ("", ()),
    ("   ", ()),
    ("x", (R("x", "exists"),)),
    ("!x", (R("x", "!"),)),
    ("! x", (R("x", "!"),)),
    ("x=a", (R("x", "=", ("a",)),)),
    ("x==a", (R("x", "==", ("a",)),)),
    ("x!=a", (R("x", "!=", ("a",)),)),
    ("x = a", (R("x", "=", ("a",)),)),
    ("x=", (R("x", "=", ("",)),)),
    ("x=,y", (R("x", "=", ("",)), R("y", "exists"))),
    ("x>1", (R("x", "gt", ("1",)),)),
    ("x<05", (R("x", "lt", ("05",)),)),
    ("x in (a,b)", (R("x", "in", ("a", "b")),)),
    ("x in (b,a,b)", (R("x", "in", ("a", "b")),)),
    ("x notin (a)", (R("x", "notin", ("a",)),)),
    ("x in ()", (R("x", "in", ("",)),)),
    ("x in (,)", (R("x", "in", ("",)),)),
    ("x in (a,,b)", (R("x", "in", ("", "a", "b")),)),
    ("x in (a,)", (R("x", "in", ("", "a")),)),
    ("x in (in)", (R("x", "in", ("in",)),)),
    ("in in (notin)", (R("in", "in", ("notin",)),)),
    ("x=in", (R("x", "=", ("in",)),)),
    (
        "app=web,tier in (a,b),!legacy",
        (R("app", "=", ("web",)), R("legacy", "!"), R("tier", "in", ("a", "b"))),
    ),
    ("z,y,x", (R("x", "exists"), R("y", "exists"), R("z", "exists"))),
    ("example.com/app=web", (R("example.com/app", "=", ("web",)),)),
    ("a.b-c_d=e.f-g_h", (R("a.b-c_d", "=", ("e.f-g_h",)),)),
    ("x\t=\ta , y", (R("x", "=", ("a",)), R("y", "exists"))),
    # Go's lexer: a NUL ends the token it is in and lexing goes on; at the
    # start of a token it ends the input.
    ("x=a\0,y", (R("x", "=", ("a",)), R("y", "exists"))),
    ("x=a\0", (R("x", "=", ("a",)),)),
    ("\0x=a", ()),
    ("x in (a,,)", (R("x", "in", ("", "a")),)),  # accepted since apimachinery 1.35
    ("k" * 63, (R("k" * 63, "exists"),)),
]

INVALID: list[tuple[str, str]] = [
    ("x=a\0garbage!!", "expected: ',' or 'end of string'"),
    ("x\0y", "expected: in, notin, =, ==, !=, gt, lt"),
    ("x=a, \0", "identifier after ','"),
    ("x=a,", "expected: identifier after ','"),
    (",x", "expected: !, identifier, or 'end of string'"),
    ("=a", "expected: !, identifier, or 'end of string'"),
    ("x y", "expected: in, notin, =, ==, !=, gt, lt"),
    ("x===a", "found '=', expected: identifier"),
    ("x in a", "expected: '('"),
    ("x in (a", "expected: ',' or ')'"),
    ("x in (a b)", "expected: ',' or ')'"),
    ("x in (=)", "expected: ',', ')' or identifier"),
    ("!x=a", "expected: ',' or 'end of string'"),
    ("!", "found '', expected: identifier"),
    ("!!x", "found '!', expected: identifier"),
    ("x=a=b", "expected: ',' or 'end of string'"),
    ("x>a", "must be an integer"),
    ("x>", "must be an integer"),
    ("x<1.5", "must be an integer"),
    ("x>99999999999999999999", "must be an integer"),
    ("x=a b", "expected: ',' or 'end of string'"),
    ("-x", "invalid label key"),
    ("x-", "invalid label key"),
    ("a/b/c", "invalid label key"),
    ("/x", "prefix part must be non-empty"),
    ("Example.com/x", "RFC 1123"),
    ("k" * 64, "no more than 63"),
    ("x=-a", "valid label"),
    ("x=" + "v" * 64, "no more than 63"),
    ("x in (a,-b)", "valid label"),
    ("x notin (a) y", "expected: ',' or 'end of string'"),
    ("x,", "identifier after ','"),
    ("x<-5", "valid label"),  # apimachinery validates the number as a label value too
]


@pytest.mark.parametrize(("text", "expected"), VALID)
def test_valid_selectors(text: str, expected: tuple[Requirement, ...]) -> None:
    assert parse_selector(text) == expected


@pytest.mark.parametrize(("text", "message"), INVALID)
def test_invalid_selectors(text: str, message: str) -> None:
    with pytest.raises(SelectorError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_selector(text)


def test_selector_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unable to parse requirement"):
        parse_selector("x in (a")


MATCHES: list[tuple[str, dict[str, str], bool]] = [
    ("", {}, True),
    ("x", {"x": ""}, True),
    ("x", {}, False),
    ("!x", {}, True),
    ("!x", {"x": "a"}, False),
    ("x=a", {"x": "a"}, True),
    ("x=a", {"x": "b"}, False),
    ("x=a", {}, False),
    ("x==a", {"x": "a"}, True),
    ("x!=a", {"x": "b"}, True),
    ("x!=a", {}, True),
    ("x!=a", {"x": "a"}, False),
    ("x in (a,b)", {"x": "b"}, True),
    ("x in (a,b)", {"x": "c"}, False),
    ("x in (a,b)", {}, False),
    ("x notin (a,b)", {}, True),
    ("x notin (a,b)", {"x": "a"}, False),
    ("x notin (a,b)", {"x": "c"}, True),
    ("x in ()", {"x": ""}, True),
    ("x>5", {"x": "6"}, True),
    ("x>5", {"x": "5"}, False),
    ("x>5", {"x": "abc"}, False),
    ("x>5", {}, False),
    ("x<5", {"x": "-1"}, True),
    ("x<5", {"x": "+9"}, False),
    ("app=web,tier in (a,b),!legacy", {"app": "web", "tier": "a"}, True),
    ("app=web,tier in (a,b),!legacy", {"app": "web", "tier": "a", "legacy": "1"}, False),
    ("app=web,tier in (a,b),!legacy", {"app": "web", "tier": "c"}, False),
]


@pytest.mark.parametrize(("text", "labels", "expected"), MATCHES)
def test_matching(text: str, labels: dict[str, str], expected: bool) -> None:
    assert matches(parse_selector(text), labels) is expected


def test_requirement_round_trips_through_proto_and_text() -> None:
    reqs = parse_selector("app=web,tier in (a,b),!legacy,n>3,k")
    assert tuple(Requirement.from_proto(r.to_proto()) for r in reqs) == reqs
    assert parse_selector(",".join(str(r) for r in reqs)) == reqs


@pytest.mark.parametrize("value", ["5\n", " 5", "5 ", "0x5", "5.0", ""])
def test_gt_and_lt_need_the_whole_value_to_be_an_integer(value: str) -> None:
    (gt,) = parse_selector("x>1")
    (lt,) = parse_selector("x<9")
    assert not gt.matches({"x": value})
    assert not lt.matches({"x": value})
    assert gt.matches({"x": "+5"})


def test_exact_requirements_travel_on_the_wire() -> None:
    exact = Requirement("app", "=", ("web",), exact=True)
    wire = exact.to_proto()
    assert wire.exact
    assert Requirement.from_proto(wire) == exact
    assert exact.matches({"app": "web"})
    assert not exact.matches({"app": "webx"})
    with pytest.raises(SelectorError, match="exact"):
        Requirement("app", "in", ("a", "b"), exact=True)
