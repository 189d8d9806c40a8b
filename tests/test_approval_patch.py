"""The approver's patch: parsing, lenient-count/strict-content application, rendering rows."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from approvals.core.patch import (
    FilePatch,
    Hunk,
    PatchError,
    apply_file_patch,
    apply_patch,
    diff_rows,
    parse_patch,
)
from approvals.diff_view import highlight_css, highlight_rows
from policies.core.diffs import file_diff


def text_of(lines: list[str]) -> str:
    """What the producer's "after" side is: "\\n"-terminated lines, "" for none."""
    return "\n".join(lines) + "\n" if lines else ""


def diff(before: list[str] | None, after: list[str] | None, path: str = "docs/a.md") -> str:
    enc = [None if side is None else text_of(side).encode() for side in (before, after)]
    return file_diff(enc[0], enc[1], path)


# Lines as splitlines() sees them: no line-boundary characters inside.
_BOUNDARIES = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
line = st.one_of(
    st.sampled_from(["", " ", "  indented", "same", "-- dashes", "+++ plus", "@@ x", "\\ back"]),
    st.text(st.characters(blacklist_characters=_BOUNDARIES, blacklist_categories=["Cs"])),
)
lines = st.lists(line, max_size=25)

FILE = [f"line {i}" for i in range(1, 21)]


@settings(max_examples=300, deadline=None)
@given(before=lines, after=lines)
def test_round_trip_reproduces_the_after_side(before: list[str], after: list[str]) -> None:
    assume(before != after)
    text = diff(before, after)
    (patch,) = parse_patch(text)
    assert apply_file_patch(text_of(before), patch) == text_of(after)
    # As a browser submits it: CRLF, blank context lines' space stripped, trailing padding.
    mangled = "\r\n".join("" if x == " " else x for x in text.split("\n")) + "\r\n"
    (patch,) = parse_patch(mangled)
    assert apply_file_patch(text_of(before), patch) == text_of(after)


@settings(max_examples=100, deadline=None)
@given(before=lines, after=lines)
def test_diff_rows_never_raises_and_numbers_lines(before: list[str], after: list[str]) -> None:
    (f,) = diff_rows(diff(before, after)) or [None]
    if f is None:
        assert before == after
        return
    for r in f.inline:
        assert r.old_no is None or r.text == before[r.old_no - 1]
        assert r.new_no is None or r.text == after[r.new_no - 1]
    for r in f.side:
        assert r.left_no is None or r.left_text == before[r.left_no - 1]
        assert r.right_no is None or r.right_text == after[r.right_no - 1]
        assert r.kind != "change" or (r.left_no and r.right_no)


@given(st.text(max_size=300))
def test_diff_rows_never_raises_on_garbage(text: str) -> None:
    diff_rows(text)


def test_edited_plus_lines_with_wrong_counts_still_apply() -> None:
    after = list(FILE)
    after[9] = "changed"
    text = diff(FILE, after)
    assert "@@ -7,7 +7,7 @@" in text
    edited = text.replace("+changed\n", "+changed\n+one more\n+and another\n")
    (result,) = apply_patch({"docs/a.md": text_of(FILE)}, edited, {"docs/a.md"}).values()
    assert result == text_of([*FILE[:9], "changed", "one more", "and another", *FILE[10:]])
    # Removing the '+' line entirely: the file just loses line 10.
    dropped = text.replace("+changed\n", "")
    (result,) = apply_patch({"docs/a.md": text_of(FILE)}, dropped, {"docs/a.md"}).values()
    assert result == text_of(FILE[:9] + FILE[10:])


def test_changed_context_line_refuses_naming_file_and_line() -> None:
    after = list(FILE)
    after[9] = "changed"
    edited = diff(FILE, after).replace(" line 8\n", " line eight\n")
    with pytest.raises(PatchError) as err:
        apply_patch({"docs/a.md": text_of(FILE)}, edited, {"docs/a.md"})
    assert str(err.value) == (
        "docs/a.md, hunk 1 (line 8): the patch expects 'line eight' but the file has 'line 8'"
    )


def test_patch_that_no_longer_matches_the_current_file_refuses() -> None:
    after = list(FILE)
    after[9] = "changed"
    current = list(FILE)
    current[9] = "someone else changed this"
    with pytest.raises(PatchError, match=r"hunk 1 \(line 10\).*'line 10'"):
        apply_patch({"docs/a.md": text_of(current)}, diff(FILE, after), {"docs/a.md"})


def test_crlf_patch_text_and_blank_context_lines_apply() -> None:
    before = ["a", "", "b", "c"]
    after = ["a", "", "B", "c"]
    text = diff(before, after)
    # A browser textarea: CRLF line endings, the blank context's space stripped, padding.
    submitted = text.replace("\n \n", "\n\n").replace("\n", "\r\n") + "\r\n\r\n"
    assert "\r\n\r\n-b" in submitted
    assert apply_patch({"x.md": text_of(before)}, submitted.replace("docs/a.md", "x.md"), {"x.md"})[
        "x.md"
    ] == text_of(after)


def test_no_newline_marker_is_ignored() -> None:
    text = "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-old\n\\ No newline at end of file\n+new\n"
    assert apply_file_patch("old", parse_patch(text)[0]) == "new\n"


def test_untouched_lines_keep_their_crlf_ends_and_a_missing_final_newline() -> None:
    before = b"a\r\nb\r\nc\r\n"
    text = file_diff(before, b"a\r\nB\r\nc\r\n", "f.txt")
    assert apply_patch({"f.txt": before.decode()}, text, {"f.txt"}) == {"f.txt": "a\r\nB\r\nc\r\n"}
    before = b"a\nb\nlast line"
    text = file_diff(before, b"a\nB\nlast line", "g.txt")
    assert apply_patch({"g.txt": before.decode()}, text, {"g.txt"}) == {"g.txt": "a\nB\nlast line"}


@pytest.mark.parametrize("odd", ["\x0c", "\x85", "\u2028", "\r"])
def test_a_file_with_other_line_separators_is_not_edited(odd: str) -> None:
    before = f"a\nb{odd}c\nd\n"
    text = file_diff(before.encode(), f"a\nb{odd}c\nD\n".encode(), "f.txt")
    with pytest.raises(PatchError, match="line separators"):
        apply_patch({"f.txt": before}, text, {"f.txt"})


def test_a_file_with_mixed_line_ends_is_not_edited() -> None:
    before = "a\r\nb\nc\r\n"
    text = file_diff(before.encode(), b"a\r\nB\nc\r\n", "f.txt")
    with pytest.raises(PatchError, match="mixes"):
        apply_patch({"f.txt": before}, text, {"f.txt"})


def test_long_runs_of_blank_lines_and_long_files_parse_and_apply() -> None:
    """Inputs that were quadratic: 40,000 blank context lines; a hunk far from its header."""
    before = "\n" * 40_000 + "x\n"
    text = file_diff(before.encode(), ("\n" * 40_000 + "y\n").encode(), "f.txt")
    assert apply_patch({"f.txt": before}, text, {"f.txt"})["f.txt"].endswith("\ny\n")
    blanks = "--- a/f.txt\n+++ b/f.txt\n@@ -1,1 +1,1 @@\n" + "\n" * 40_000 + "-x\n+y\n"
    with pytest.raises(PatchError):
        apply_patch({"f.txt": "x\n"}, blanks, {"f.txt"})
    moved = "".join(f"{i}\n" for i in range(60_000))
    far = "--- a/f.txt\n+++ b/f.txt\n@@ -1,1 +1,1 @@\n-59999\n+last\n"
    with pytest.raises(PatchError, match="expects '59999'"):
        apply_patch({"f.txt": moved}, far, {"f.txt"})  # further than MAX_OFFSET lines


def test_path_not_allowed_refuses() -> None:
    text = diff(["a"], ["b"], "secret.env")
    with pytest.raises(PatchError, match=r"the patch may only change docs/a\.md, docs/b\.md"):
        apply_patch({"secret.env": "a\n"}, text, ["docs/b.md", "docs/a.md"])


def test_same_path_twice_refuses() -> None:
    text = diff(["a"], ["b"]) + diff(["a"], ["c"])
    with pytest.raises(PatchError, match="more than once"):
        apply_patch({"docs/a.md": "a\n"}, text, {"docs/a.md"})


def test_several_files_creation_and_deletion() -> None:
    text = diff(None, ["new", "", "file"], "new.md") + diff(["x", "y"], None, "old.md")
    text += diff(["1", "2"], ["1", "two"], "docs/a.md")
    (created, deleted, changed) = parse_patch(text)
    assert (created.old_path, created.new_path, created.path) == (None, "new.md", "new.md")
    assert (deleted.old_path, deleted.new_path, deleted.path) == ("old.md", None, "old.md")
    assert changed.hunks == (Hunk(1, ((" ", "1"), ("-", "2"), ("+", "two"))),)
    originals = {"new.md": None, "old.md": "x\ny\n", "docs/a.md": "1\n2\n"}
    result = apply_patch(originals, text, {"new.md", "old.md", "docs/a.md"})
    assert result == {"new.md": "new\n\nfile\n", "old.md": None, "docs/a.md": "1\ntwo\n"}


def test_creation_and_existence_must_agree() -> None:
    with pytest.raises(PatchError, match="already exists"):
        apply_patch({"n.md": "here\n"}, diff(None, ["x"], "n.md"), {"n.md"})
    with pytest.raises(PatchError, match="does not exist"):
        apply_patch({}, diff(["a"], ["b"], "n.md"), {"n.md"})
    # An empty existing file is not an absent one.
    assert apply_patch({"n.md": ""}, diff([], ["x"], "n.md"), {"n.md"}) == {"n.md": "x\n"}


def test_deletion_must_remove_every_line() -> None:
    text = diff(["x", "y"], None, "old.md").replace("-y\n", " y\n")
    with pytest.raises(PatchError, match="deletes the file but leaves lines"):
        apply_patch({"old.md": "x\ny\n"}, text, {"old.md"})


def test_offset_when_the_file_gained_lines_above() -> None:
    after = list(FILE)
    after[4], after[15] = "five", "sixteen"
    text = diff(FILE, after)
    assert text.count("@@ ") == 2
    current = ["new top", "another", *FILE]
    expected = ["new top", "another", *after]
    result = apply_patch({"docs/a.md": text_of(current)}, text, {"docs/a.md"})
    assert result["docs/a.md"] == text_of(expected)
    # Fewer lines above works too, and the nearest match wins over a farther one.
    (patch,) = parse_patch(text)
    assert apply_file_patch(text_of(FILE[1:]), patch) == text_of(after[1:])


def test_nearest_match_wins() -> None:
    body = ["x", "y", "z"] * 3
    text = "--- a/f\n+++ b/f\n@@ -4,3 +4,3 @@\n x\n-y\n+Y\n z\n"
    assert apply_file_patch(text_of(body), parse_patch(text)[0]) == text_of(
        ["x", "y", "z", "x", "Y", "z", "x", "y", "z"]
    )


def test_overlapping_or_out_of_order_hunks_refuse() -> None:
    after = list(FILE)
    after[4], after[15] = "five", "sixteen"
    text = diff(FILE, after)
    first_at = text.index("@@ ")
    second_at = text.index("@@ ", first_at + 1)
    head, first, second = text[:first_at], text[first_at:second_at], text[second_at:]
    with pytest.raises(PatchError, match="hunk 2: overlaps the previous hunk or is out of order"):
        apply_patch({"docs/a.md": text_of(FILE)}, head + second + first, {"docs/a.md"})
    overlapping = head + first + first.replace("+five", "+FIVE")
    with pytest.raises(PatchError, match="hunk 2: overlaps"):
        apply_patch({"docs/a.md": text_of(FILE)}, overlapping, {"docs/a.md"})


def test_a_removed_line_that_looks_like_a_header_stays_in_the_hunk() -> None:
    cases = [(["-- a/x", "keep"], ["++ b/x", "keep"]), (["k", "-- a/x"], ["k", "++ b/x"])]
    for before, after in cases:
        text = diff(before, after) + diff(["a"], ["b"], "other.md")
        assert "\n--- a/x\n+++ b/x\n" in text
        patch, other = parse_patch(text)
        assert apply_file_patch(text_of(before), patch) == text_of(after)
        assert other.path == "other.md"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the patch is empty"),
        ("\r\n\n", "the patch is empty"),
        ("hello\n", "patch line 1: 'hello' is neither a file header nor in a hunk"),
        ("--- a/f\n@@ -1 +1 @@\n", "patch line 1: '--- a/f' is not followed by a '+++' line"),
        ("--- a/f\n+++ b/f\n@@ -1 +1 @@\n*x\n", "patch line 4: unknown line prefix '*'"),
        ("--- a/f\n+++ b/f\n@@ bad @@\n", "patch line 3: malformed hunk header"),
        ("@@ -1 +1 @@\n-a\n+b\n", "a hunk before any"),
        ("--- a/f\n+++ b/f\n", "f: the patch has no hunks"),
        ("--- a/f\n+++ b/g\n@@ -1 +1 @@\n-a\n+b\n", "renaming f to g is not supported"),
        ("--- /dev/null\n+++ /dev/null\n@@ -0,0 +0,0 @@\n", "both sides"),
        ("Binary file img.png: 10 bytes before, 12 bytes after.\n", "img.png: binary files"),
    ],
)
def test_garbage_refuses(text: str, message: str) -> None:
    with pytest.raises(PatchError, match=message.replace("*", r"\*").replace("+", r"\+")):
        parse_patch(text)


def test_binary_description_from_the_producer_refuses() -> None:
    text = file_diff(b"\xff\xfe", b"\xff", "img.png")
    with pytest.raises(PatchError, match="binary files cannot be edited"):
        apply_patch({"img.png": None}, text, {"img.png"})


def test_git_extended_headers_are_ignored() -> None:
    text = "diff --git a/f b/f\nindex 123..456 100644\n" + diff(["a"], ["b"], "f")
    assert apply_file_patch("a\n", parse_patch(text)[0]) == "b\n"


def test_file_patch_path() -> None:
    assert FilePatch(None, "n", ()).path == "n"
    assert FilePatch("o", None, ()).path == "o"


def test_diff_rows_side_by_side_pairing() -> None:
    before = ["keep", "old 1", "old 2", "old 3", "tail"]
    after = ["keep", "new 1", "tail", "extra"]
    (f,) = diff_rows(diff(before, after))
    assert (f.path, f.binary) == ("docs/a.md", False)
    assert [(r.kind, r.left_no, r.left_text, r.right_no, r.right_text) for r in f.side] == [
        ("hunk", None, "@@ -1,5 +1,4 @@", None, "@@ -1,5 +1,4 @@"),
        ("context", 1, "keep", 1, "keep"),
        ("change", 2, "old 1", 2, "new 1"),
        ("del", 3, "old 2", None, None),
        ("del", 4, "old 3", None, None),
        ("context", 5, "tail", 3, "tail"),
        ("add", None, None, 4, "extra"),
    ]
    assert [(r.kind, r.old_no, r.new_no, r.text) for r in f.inline] == [
        ("hunk", None, None, "@@ -1,5 +1,4 @@"),
        ("context", 1, 1, "keep"),
        ("del", 2, None, "old 1"),
        ("del", 3, None, "old 2"),
        ("del", 4, None, "old 3"),
        ("add", None, 2, "new 1"),
        ("context", 5, 3, "tail"),
        ("add", None, 4, "extra"),
    ]


def test_diff_rows_several_files_binary_and_odd_lines() -> None:
    text = diff(None, ["x"], "n.py") + "Binary file i.png: absent before, 3 bytes after.\n"
    text += "stray line\n" + diff(["a"], None, "gone.txt")
    files = diff_rows(text)
    assert [(f.path, f.binary) for f in files] == [
        ("n.py", False),
        ("i.png", True),
        ("", False),
        ("gone.txt", False),
    ]
    assert files[0].inline[1] == files[0].inline[1].__class__("add", None, 1, "x", hunk=1)
    assert files[2].inline[0].kind == "context" and files[2].inline[0].text == "stray line"
    assert files[3].side[1].kind == "del" and files[3].side[1].left_no == 1


def test_highlight_escapes_html_and_names_the_language() -> None:
    text = diff(["<p>hi</p>"], ["<script>alert('x')</script>", "a & b"], "page.py")
    text += diff(["<p>hi</p>"], ["<script>alert('x')</script>"], "page.txt")
    f, plain = highlight_rows(diff_rows(text))
    assert (f["path"], f["binary"], f["language"]) == ("page.py", False, "Python")
    assert plain["language"] == "Text only"
    for each in (f, plain):
        html = " ".join(r["html"] for r in each["inline"])
        html += " ".join(r["left_html"] or "" for r in each["side"])
        html += " ".join(r["right_html"] or "" for r in each["side"])
        assert "<script" not in html and "<p" not in html and "&lt;" in html
        assert all(not r["html"].endswith("\n") for r in each["inline"])
    assert "&amp;" in f["inline"][-1]["html"] and '<span class="' in f["inline"][-1]["html"]
    # Pygments escapes &, < and > (not quotes): safe as element content, not as an attribute.
    assert plain["inline"][-1]["html"] == "&lt;script&gt;alert('x')&lt;/script&gt;"
    change = next(r for r in f["side"] if r["kind"] == "change")
    assert change["left_no"] == 1 and change["right_no"] == 1
    add = next(r for r in f["side"] if r["kind"] == "add")
    assert add["left_html"] is None and add["left_no"] is None


def test_highlight_unknown_extension_falls_back_to_text() -> None:
    (f,) = highlight_rows(diff_rows(diff(["a"], ["<b>"], "notes.zzzunknown")))
    assert f["language"] == "Text only"
    assert [r["html"] for r in f["inline"][1:]] == ["a", "&lt;b&gt;"]
    assert ".hl" in highlight_css()
