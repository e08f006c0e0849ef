"""Tests for slug.slugify (standard library unittest: python3 -m unittest -v test_slug)."""
import unittest

from slug import slugify


class SlugifyTest(unittest.TestCase):
    def test_plain_word(self):
        self.assertEqual(slugify("hello"), "hello")

    def test_digits_kept(self):
        self.assertEqual(slugify("python 3 12"), "python-3-12")

    def test_lowercase(self):
        self.assertEqual(slugify("Release Notes"), "release-notes")

    def test_accents(self):
        self.assertEqual(slugify("crème brûlée"), "creme-brulee")

    def test_collapse_separators(self):
        self.assertEqual(slugify("fork  --  and   join"), "fork-and-join")

    def test_no_edge_dashes(self):
        self.assertEqual(slugify("(draft) notes!"), "draft-notes")

    def test_title(self):
        self.assertEqual(slugify("  Ünïcode, Tabs\tand Spaces!  "), "unicode-tabs-and-spaces")


if __name__ == "__main__":
    unittest.main()
