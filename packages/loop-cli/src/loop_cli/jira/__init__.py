"""Jira as a ticket source (issue 28): REST client, JQL polling, ADF, webhook rules."""
