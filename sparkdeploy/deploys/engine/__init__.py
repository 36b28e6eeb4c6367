"""The engine: a systemd unit and a narrowly scoped sudoers file per service of the plan,
health checked after every start."""
