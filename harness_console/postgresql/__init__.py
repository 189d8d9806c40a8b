"""Django's PostgreSQL backend with the console's pool (``base``): DATABASES' ENGINE in the
production configuration."""
