"""URL slugs for article titles: slugify("Hello, World!") == "hello-world"."""
import re


def slugify(text: str) -> str:
    """Return a lowercase ASCII slug: words joined by single dashes."""
    text = text.strip()
    slug = re.sub(r"[^A-Za-z0-9]", "-", text)
    return slug
