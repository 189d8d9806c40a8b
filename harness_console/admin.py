"""Users and roles in the admin, in place of Django's stock pages: roles cannot escalate.

The admin role manages who holds which of the four roles (harness_console/roles.py) and
nothing more. For anyone who is not a superuser, enforced on the server (the fields are
not in the form class, so a POST naming them changes nothing, and what is saved is checked
again after the form has saved):

- **no superuser, no extra powers**: ``is_superuser`` and ``user_permissions`` are not
  offered, and ``is_staff`` is not a choice either: it follows the admin role (the one role
  that opens the admin). Groups are the four roles only; another group is "not a valid
  choice".
- **no one else's password**: the admin's password form (which asks no old password) is
  for superusers; everyone changes their own through the ordinary password change.
- **only superusers manage superusers**, and users whose powers reach beyond the four
  roles (direct permissions, other groups, staff without the admin role): such a user is
  read-only for everyone else, and cannot be deleted by them.
- **the roles themselves are not edited here**: a group's permissions come from roles.py
  (synced on every migrate), so the group pages are read-only for non-superusers.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

from .roles import ADMIN, ROLES

ROLE_FIELDSETS = (
    (None, {"fields": ("username", "password")}),
    ("Personal info", {"fields": ("first_name", "last_name", "email")}),
    (
        "Roles",
        {
            "fields": ("is_active", "groups"),
            "description": (
                "A user holds one or more of the four roles. Staff status (access to "
                "this admin) follows the admin role; only superusers grant anything else."
            ),
        },
    ),
    ("Important dates", {"fields": ("last_login", "date_joined")}),
)


def within_roles(user: User) -> bool:
    """Every power this user has comes from the four roles: the kind of user a
    non-superuser may manage."""
    groups = set(user.groups.values_list("name", flat=True))
    return (
        not user.is_superuser
        and not user.user_permissions.exists()
        and groups <= set(ROLES)
        and (not user.is_staff or ADMIN in groups)
    )


class ConsoleUserAdmin(UserAdmin):
    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None or request.user.is_superuser:
            return super().get_fieldsets(request, obj)
        return ROLE_FIELDSETS

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if request.user.is_superuser:
            return super().get_readonly_fields(request, obj)
        return ("last_login", "date_joined")

    def formfield_for_manytomany(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "groups" and not request.user.is_superuser:
            kwargs["queryset"] = Group.objects.filter(name__in=ROLES).order_by("name")
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        allowed = super().has_change_permission(request, obj)
        if obj is None or request.user.is_superuser:
            return allowed
        return allowed and within_roles(obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        allowed = super().has_delete_permission(request, obj)
        if obj is None or request.user.is_superuser:
            return allowed
        return allowed and within_roles(obj)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        """The list's bulk delete asks no per-user question: ask it here."""
        if not request.user.is_superuser and not all(within_roles(u) for u in queryset):
            raise PermissionDenied
        super().delete_queryset(request, queryset)

    def user_change_password(self, request: HttpRequest, id: str, form_url: str = "") -> Any:
        """Setting a password without the old one is a superuser's power (a non-superuser
        could take over any account with it); one's own goes through the password change."""
        if not request.user.is_superuser:
            raise PermissionDenied
        return super().user_change_password(request, id, form_url)

    def save_model(self, request: HttpRequest, obj: User, form: Any, change: bool) -> None:
        if not request.user.is_superuser:
            before = User.objects.filter(pk=obj.pk).first() if change else None
            if before is not None and not within_roles(before):
                raise PermissionDenied  # has_change_permission already said so
            obj.is_superuser = False
        super().save_model(request, obj, form, change)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        """After the form's groups are saved: for a non-superuser's edit, staff status is
        what the roles imply, and nothing beyond the roles survives (the form offered none
        of it; this holds even if a later form did)."""
        super().save_related(request, form, formsets, change)
        if request.user.is_superuser:
            return
        user = form.instance
        user.groups.remove(*user.groups.exclude(name__in=ROLES))
        user.user_permissions.clear()
        staff = user.groups.filter(name=ADMIN).exists()
        if (user.is_staff, user.is_superuser) != (staff, False):
            user.is_staff, user.is_superuser = staff, False
            user.save(update_fields=["is_staff", "is_superuser"])


class RoleGroupAdmin(GroupAdmin):
    """The role groups are defined in roles.py; only superusers edit groups here."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_superuser) and super().has_add_permission(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_superuser) and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_superuser) and super().has_delete_permission(request, obj)


admin.site.unregister(User)
admin.site.register(User, ConsoleUserAdmin)
admin.site.unregister(Group)
admin.site.register(Group, RoleGroupAdmin)

_admin_login = admin.site.login


def _login_or_refuse(request: HttpRequest, extra_context: Any = None) -> Any:
    """Someone signed in whose role does not open the admin gets the console's 403 page,
    saying so, not Django's admin login form inviting them to sign in again as someone
    else (issue 19); the signed-out still get the login form."""
    if request.user.is_authenticated and not admin.site.has_permission(request):
        raise PermissionDenied(
            "The admin pages are for the admin role; yours does not include them. Ask an "
            "admin if you need a change made here."
        )
    return _admin_login(request, extra_context)


admin.site.login = _login_or_refuse  # type: ignore[method-assign]
