"""The observability core, pure: rollup arithmetic, cost, and the retrospective's figures."""
