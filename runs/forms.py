from __future__ import annotations

from django import forms

from policies.models import Agent, Workspace

from .services import MAX_REQUEST_CHARS


class RunForm(forms.Form):
    # The eval set's own agents and workspaces run its cases only.
    agent = forms.ModelChoiceField(queryset=Agent.objects.without_evals(), empty_label=None)
    workspace = forms.ModelChoiceField(queryset=Workspace.objects.without_evals(), empty_label=None)
    request = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 6}),
        max_length=MAX_REQUEST_CHARS,
        error_messages={"required": "Describe the task: the request is empty."},
        help_text="What the agent should do, in your own words.",
    )

    def clean_request(self) -> str:
        text = self.cleaned_data["request"].strip()
        if not text:
            raise forms.ValidationError("Describe the task: the request is empty.")
        return text
