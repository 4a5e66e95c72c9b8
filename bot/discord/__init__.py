"""Discord: the gateway client, app-command groups, approval buttons and channel posts,
all translating to and from the platform-neutral command layer."""
