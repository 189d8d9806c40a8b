"""Review at hunk level (issue 18, B7), pure: which hunks a diff has, the patch of the
accepted ones, what the model is told became of each, and the digest a decision on a
subset binds to."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from approvals.core.fingerprint import accepted_digest
from approvals.core.hunks import (
    file_part,
    hunks_of,
    hunks_reviewed,
    hunks_select,
    rejection_problem,
    verdict_text,
)
from approvals.core.patch import Hunk, apply_patch, diff_rows, parse_patch
from policies.core.diffs import file_diff

PATH = "docs/guide.md"
GUIDE = [f"Line {n} of the guide." for n in range(1, 21)]


def text(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


def edited(lines: list[str], changes: dict[int, str]) -> list[str]:
    return [changes.get(n, line) for n, line in enumerate(lines, 1)]


def diff(before: list[str], after: list[str], path: str = PATH) -> str:
    return file_diff(text(before).encode(), text(after).encode(), path)


# Two changes far apart: two hunks.
TWO = diff(GUIDE, edited(GUIDE, {2: "Line two, reworded.", 17: "Line seventeen, reworded."}))


def alone(original: list[str], hunks: list[Hunk]) -> list[str]:
    """The hunks applied by position, without the applier: what "those hunks alone" is."""
    out = list(original)
    for hunk in reversed(hunks):
        start = hunk.old_start - 1 if hunk.old_lines else hunk.old_start
        assert out[start : start + len(hunk.old_lines)] == hunk.old_lines
        out[start : start + len(hunk.old_lines)] = hunk.new_lines
    return out


@st.composite
def changed_files(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    """A file and an edit of it in several places: lines replaced, removed and added."""
    alphabet = draw(st.sampled_from([None, ["a", "b", "", "c"]]))
    size = draw(st.integers(0, 40))
    if alphabet is None:
        before = [f"line {n}" for n in range(size)]
    else:
        before = draw(st.lists(st.sampled_from(alphabet), min_size=size, max_size=size))
    after = list(before)
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(after)))
        how = draw(st.sampled_from(["replace", "remove", "add"]))
        if how == "add" or at == len(after):
            after.insert(at, f"new {draw(st.integers(0, 99))}")
        elif how == "remove":
            del after[at]
        else:
            after[at] = f"changed {draw(st.integers(0, 99))}"
    return before, after


@given(changed_files(), st.data())
def test_applying_the_accepted_hunks_is_applying_those_hunks_alone(files, data):
    before, after = files
    assume(before != after)
    proposed = diff(before, after)
    (patch,) = parse_patch(proposed)
    numbers = range(1, len(patch.hunks) + 1)
    rejected = data.draw(
        st.sets(st.sampled_from(list(numbers))).filter(lambda s: s != set(numbers))
    )
    accepted = [h for n, h in enumerate(patch.hunks, 1) if n not in rejected]
    subset = hunks_select(proposed, {PATH: rejected})
    result = apply_patch({PATH: text(before)}, subset, [PATH])[PATH]
    assert result == text(alone(before, accepted))
    assert not rejection_problem(proposed, {PATH: sorted(rejected)})


@given(changed_files())
def test_all_hunks_accepted_is_the_full_patch(files):
    before, after = files
    assume(before != after)
    proposed = diff(before, after)
    assert hunks_select(proposed, {}) == proposed  # byte for byte, as the producer wrote it
    assert apply_patch({PATH: text(before)}, hunks_select(proposed, {}), [PATH])[PATH] == text(
        after
    )
    reviewed = hunks_reviewed(proposed, proposed, {})
    assert {v.verdict for v in reviewed} == {"accepted"}


@given(changed_files())
def test_the_page_and_the_form_number_hunks_alike(files):
    before, after = files
    assume(before != after)
    proposed = diff(before, after)
    refs = hunks_of(proposed)
    (rows,) = diff_rows(proposed)
    headers = [(r.hunk, r.text) for r in rows.inline if r.kind == "hunk"]
    assert [(r.number, r.header) for r in refs] == headers
    assert {r.hunk for r in rows.side if r.kind == "hunk"} == {r.number for r in refs}


def test_a_hunk_is_named_by_its_file_its_number_and_its_header():
    refs = hunks_of(TWO)
    assert [r.label for r in refs] == [
        f"hunk 1 of {PATH} (@@ -1,5 +1,5 @@)",
        f"hunk 2 of {PATH} (@@ -14,7 +14,7 @@)",
    ]
    assert [r.key for r in refs] == [f"{PATH}:1", f"{PATH}:2"]


def test_the_accepted_patch_renumbers_the_new_side_and_keeps_the_old():
    lines = edited(GUIDE, {2: "Two.", 17: "Seventeen."})
    lines.insert(2, "Two and a half.")
    proposed = diff(GUIDE, lines)
    assert [r.header for r in hunks_of(proposed)] == ["@@ -1,5 +1,6 @@", "@@ -14,7 +15,7 @@"]
    assert [r.header for r in hunks_of(hunks_select(proposed, {PATH: [1]}))] == [
        "@@ -14,7 +14,7 @@"
    ]
    assert [r.header for r in hunks_of(hunks_select(proposed, {PATH: [2]}))] == ["@@ -1,5 +1,6 @@"]


def test_a_file_with_every_hunk_rejected_is_left_out_and_keeps_its_text():
    other = diff(["a", "b"], ["a", "B"], "docs/other.md")
    both = TWO + other
    subset = hunks_select(both, {"docs/other.md": [1]})
    assert [p.path for p in parse_patch(subset)] == [PATH]
    originals = {PATH: text(GUIDE), "docs/other.md": "a\nb\n"}
    result = apply_patch(originals, subset, [PATH, "docs/other.md"])
    assert "docs/other.md" not in result  # untouched: the caller keeps the file as it is
    assert file_part(both, "docs/other.md") == other
    assert file_part(both, "docs/nowhere.md") == ""


def test_lines_the_accepted_hunks_do_not_touch_keep_their_bytes_crlf_included():
    original = text(GUIDE).replace("\n", "\r\n")
    result = apply_patch({PATH: original}, hunks_select(TWO, {PATH: [2]}), [PATH])[PATH]
    assert result == text(edited(GUIDE, {2: "Line two, reworded."})).replace("\n", "\r\n")


# --- what cannot be chosen -------------------------------------------------------------------
def test_an_unknown_file_or_hunk_is_named():
    assert rejection_problem(TWO, {"docs/x.md": [1]}) == (
        f"docs/x.md is not a file of this change (it changes {PATH})."
    )
    assert rejection_problem(TWO, {PATH: [3]}) == f"{PATH} has 2 hunks: there is no hunk 3."
    assert rejection_problem(TWO, {PATH: [0]}) == (
        f"{PATH}: hunks are numbered from 1; 0 is not a hunk number."
    )
    assert "'two' is not a hunk number" in rejection_problem(TWO, {PATH: ["two"]})
    assert "True is not a hunk number" in rejection_problem(TWO, {PATH: [True]})
    assert "(no path) is not a file" in rejection_problem(TWO, {"": [1]})
    assert rejection_problem(TWO, {PATH: [2, 2]}) == ""  # twice is once


def test_rejecting_every_hunk_is_a_rejection_and_says_so():
    problem = rejection_problem(TWO, {PATH: [1, 2]})
    assert problem.startswith("You rejected every hunk: that is a rejection of the whole change.")
    assert "Reject the request instead" in problem


def test_a_created_file_cannot_be_left_out_while_the_rest_is_approved():
    created = file_diff(None, b"new\n", "docs/new.md")
    problem = rejection_problem(TWO + created, {"docs/new.md": [1]})
    assert problem.startswith("This change creates docs/new.md: it cannot be left out")
    assert rejection_problem(TWO + created, {PATH: [1]}) == ""


def test_a_diff_that_cannot_be_read_cannot_be_chosen_from():
    assert rejection_problem("Binary file x.png: 3 bytes before, 4 bytes after.\n", {}).startswith(
        "This change cannot be chosen hunk by hunk: x.png: binary files cannot be edited"
    )


# --- what the model is told ------------------------------------------------------------------
def test_the_model_hears_which_hunks_were_rejected():
    reviewed = hunks_reviewed(TWO, hunks_select(TWO, {PATH: [2]}), {PATH: [2]})
    assert [verdict_text(v) for v in reviewed] == [
        f"hunk 1 of {PATH} (@@ -1,5 +1,5 @@) accepted",
        f"hunk 2 of {PATH} (@@ -14,7 +14,7 @@) rejected by approver",
    ]


def test_an_edit_is_told_hunk_by_hunk_modified_with_the_final_text_or_left_out_or_added():
    modified = TWO.replace("+Line two, reworded.", "+Line two, by hand.")
    reviewed = hunks_reviewed(TWO, modified, {})
    assert [v.verdict for v in reviewed] == ["modified by approver", "accepted"]
    assert reviewed[0].final_text == text(
        ["Line 1 of the guide.", "Line two, by hand.", *GUIDE[2:5]]
    )
    dropped = hunks_select(TWO, {PATH: [1]})  # the edit left hunk 1 out
    assert [v.verdict for v in hunks_reviewed(TWO, dropped, {})] == [
        "rejected by approver",
        "accepted",
    ]
    added = TWO + diff(["x"], ["y"], "docs/more.md")
    more = hunks_reviewed(TWO, added, {})[-1]
    assert (more.verdict, more.final_text) == ("added by approver", "y\n")
    assert verdict_text(more) == "a hunk of docs/more.md (@@ -1 +1 @@) added by approver"


# --- the digest a decision binds to ----------------------------------------------------------
def test_the_digest_covers_exactly_the_accepted_set():
    request = "d" * 64
    assert accepted_digest(request, "", {}) == request  # approved as shown
    assert accepted_digest(request, "", {PATH: []}) == request
    one = accepted_digest(request, hunks_select(TWO, {PATH: [1]}), {PATH: [1]})
    two = accepted_digest(request, hunks_select(TWO, {PATH: [2]}), {PATH: [2]})
    assert len({request, one, two}) == 3
    assert one == accepted_digest(request, hunks_select(TWO, {PATH: [1]}), {PATH: [1, 1]})
    assert one != accepted_digest("e" * 64, hunks_select(TWO, {PATH: [1]}), {PATH: [1]})
