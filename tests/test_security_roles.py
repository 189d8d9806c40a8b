"""Roles cannot escalate (issue 16, section 4): the admin persona — staff, in the admin role,
not a superuser — posts every power a User row carries, to its own page, to another user's
and to a new user's, and ends with nothing beyond the four roles; it cannot set anyone's
password, edit or delete a superuser, or edit the role groups. Only superusers manage
superusers. Everything here is a real POST to the real admin."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client

from harness_console.roles import ADMIN, APPROVER, OPERATOR, ROLES
from tests.conftest import EVERYWHERE, PASSWORD, make_user

pytestmark = EVERYWHERE


@pytest.fixture
def admin_client(personas) -> Client:
    client = Client()
    client.force_login(personas.admin)
    return client


@pytest.fixture
def root(db) -> User:
    return User.objects.create_superuser("root", "root@example.com", PASSWORD)


@pytest.fixture
def foreign_group(db) -> Group:
    """A group outside the four roles, holding a power no role has."""
    group = Group.objects.create(name="sneaky")
    group.permissions.add(Permission.objects.get(codename="delete_user"))
    return group


def change_data(user: User, **powers: Any) -> dict[str, Any]:
    """What the stock change form posts for ``user``, plus the powers under test."""
    data: dict[str, Any] = {
        "username": user.username,
        "first_name": "",
        "last_name": "",
        "email": "",
        "is_active": "on",
        "groups": [str(g.pk) for g in user.groups.all()],
        "last_login_0": "",
        "last_login_1": "",
        "date_joined_0": "2026-01-01",
        "date_joined_1": "00:00:00",
    }
    data.update(powers)
    return data


def powers_of(user: User) -> tuple[bool, bool, set[str], set[str]]:
    user = User.objects.get(pk=user.pk)
    return (
        user.is_superuser,
        user.is_staff,
        set(user.user_permissions.values_list("codename", flat=True)),
        set(user.groups.values_list("name", flat=True)),
    )


def escalations(foreign: Group) -> dict[str, dict[str, Any]]:
    every = [str(p.pk) for p in Permission.objects.filter(content_type__app_label="auth")]
    return {
        "is_superuser": {"is_superuser": "on"},
        "is_staff": {"is_staff": "on"},
        "user_permissions": {"user_permissions": every},
        "foreign group": {"groups": [str(foreign.pk)]},
        "everything": {
            "is_superuser": "on",
            "is_staff": "on",
            "user_permissions": every,
            "groups": [str(foreign.pk), *[str(g.pk) for g in Group.objects.filter(name__in=ROLES)]],
        },
    }


@pytest.mark.parametrize("whose", ["own", "operator's", "approver's"])
def test_no_power_beyond_the_roles_sticks_whatever_is_posted(
    personas, admin_client, foreign_group, whose
):
    target = {"own": personas.admin, "operator's": personas.operator}.get(whose, personas.approver)
    for name, powers in escalations(foreign_group).items():
        before = powers_of(target)
        response = admin_client.post(
            f"/admin/auth/user/{target.pk}/change/", change_data(target, **powers)
        )
        assert response.status_code in (200, 302), (name, response.status_code)
        superuser, staff, permissions, groups = powers_of(target)
        assert not superuser, name
        assert permissions == set(), name
        assert groups <= set(ROLES), name
        assert staff == (ADMIN in groups), name
        if name != "everything":  # the role groups in it are the admin role's to give
            assert (superuser, staff, permissions, groups) == before, name


def test_a_new_user_gets_no_power_beyond_the_roles(personas, admin_client, foreign_group):
    response = admin_client.post(
        "/admin/auth/user/add/",
        {
            "username": "newcomer",
            "usable_password": "true",
            "password1": PASSWORD,
            "password2": PASSWORD,
            "is_superuser": "on",
            "is_staff": "on",
            "groups": [str(foreign_group.pk)],
        },
    )
    assert response.status_code == 302, response.content[:500]
    newcomer = User.objects.get(username="newcomer")
    assert powers_of(newcomer) == (False, False, set(), set())
    # Its change page, posted with every power at once.
    admin_client.post(
        f"/admin/auth/user/{newcomer.pk}/change/",
        change_data(newcomer, **escalations(foreign_group)["everything"]),
    )
    superuser, staff, permissions, groups = powers_of(newcomer)
    assert (superuser, permissions) == (False, set()) and groups <= set(ROLES)
    assert staff == (ADMIN in groups)


def test_roles_are_given_and_staff_follows_the_admin_role(personas, admin_client):
    operator = personas.operator
    roles = {g.name: str(g.pk) for g in Group.objects.filter(name__in=ROLES)}
    data = change_data(operator, groups=[roles[OPERATOR], roles[APPROVER]])
    assert admin_client.post(f"/admin/auth/user/{operator.pk}/change/", data).status_code == 302
    assert powers_of(operator) == (False, False, set(), {OPERATOR, APPROVER})
    data = change_data(operator, groups=[roles[ADMIN]])
    admin_client.post(f"/admin/auth/user/{operator.pk}/change/", data)
    assert powers_of(operator) == (False, True, set(), {ADMIN})
    data = change_data(operator, groups=[roles[OPERATOR]], is_staff="on")
    admin_client.post(f"/admin/auth/user/{operator.pk}/change/", data)
    assert powers_of(operator) == (False, False, set(), {OPERATOR})


def test_the_form_offers_no_power_and_no_foreign_group(personas, admin_client, foreign_group):
    page = admin_client.get(f"/admin/auth/user/{personas.operator.pk}/change/")
    assert page.status_code == 200
    form = page.context["adminform"].form
    assert not {"is_superuser", "is_staff", "user_permissions"} & set(form.fields)
    assert set(form.fields["groups"].queryset.values_list("name", flat=True)) == set(ROLES)


@pytest.mark.parametrize("whose", ["own", "operator's", "superuser's"])
def test_no_password_is_set_through_the_admin_by_a_non_superuser(
    personas, admin_client, root, whose
):
    target = {"own": personas.admin, "operator's": personas.operator}.get(whose, root)
    url = f"/admin/auth/user/{target.pk}/password/"
    assert admin_client.get(url).status_code == 403
    posted = admin_client.post(
        url,
        {
            "usable_password": "true",
            "password1": "a brand new secret 42",
            "password2": "a brand new secret 42",
        },
    )
    assert posted.status_code == 403
    assert User.objects.get(pk=target.pk).check_password(PASSWORD)


def test_the_admin_changes_its_own_password_through_the_password_change(personas, admin_client):
    response = admin_client.post(
        "/admin/password_change/",
        {
            "old_password": PASSWORD,
            "new_password1": "a brand new secret 42",
            "new_password2": "a brand new secret 42",
        },
    )
    assert response.status_code == 302
    assert User.objects.get(pk=personas.admin.pk).check_password("a brand new secret 42")


def test_only_superusers_manage_superusers(personas, admin_client, root):
    change = f"/admin/auth/user/{root.pk}/change/"
    refused = admin_client.post(change, change_data(root, is_active=""))
    assert refused.status_code == 403
    assert User.objects.get(pk=root.pk).is_active
    assert (
        admin_client.post(f"/admin/auth/user/{root.pk}/delete/", {"post": "yes"}).status_code == 403
    )
    assert User.objects.filter(pk=root.pk).exists()
    # Still readable: an admin sees who the superusers are.
    assert admin_client.get(change).status_code == 200
    # A user given powers beyond the roles (by a superuser) is a superuser's to manage too.
    special = make_user("special", OPERATOR)
    special.user_permissions.add(Permission.objects.get(codename="delete_user"))
    assert (
        admin_client.post(
            f"/admin/auth/user/{special.pk}/change/", change_data(special)
        ).status_code
        == 403
    )
    assert special.user_permissions.exists()


def test_the_role_groups_are_not_edited_by_a_non_superuser(personas, admin_client):
    group = Group.objects.get(name=OPERATOR)
    wanted = set(group.permissions.values_list("pk", flat=True))
    every = [str(p.pk) for p in Permission.objects.all()]
    response = admin_client.post(
        f"/admin/auth/group/{group.pk}/change/", {"name": OPERATOR, "permissions": every}
    )
    assert response.status_code == 403
    assert set(group.permissions.values_list("pk", flat=True)) == wanted
    added = admin_client.post("/admin/auth/group/add/", {"name": "mine", "permissions": every})
    assert added.status_code == 403 and not Group.objects.filter(name="mine").exists()


def test_a_superuser_still_manages_everyone(personas, root, foreign_group):
    client = Client()
    client.force_login(root)
    operator = personas.operator
    data = change_data(operator, is_superuser="on", is_staff="on", groups=[str(foreign_group.pk)])
    assert client.post(f"/admin/auth/user/{operator.pk}/change/", data).status_code == 302
    assert powers_of(operator)[:2] == (True, True)
    url = f"/admin/auth/user/{operator.pk}/password/"
    secret = "a brand new secret 42"
    posted = {"usable_password": "true", "password1": secret, "password2": secret}
    assert client.post(url, posted).status_code == 302
    assert User.objects.get(pk=operator.pk).check_password(secret)
