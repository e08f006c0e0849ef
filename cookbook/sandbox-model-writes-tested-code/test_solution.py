"""Tests for solution.parse_duration (standard library unittest: python3 -m unittest -v test_solution)."""
import unittest

from solution import parse_duration


class ParseDurationTest(unittest.TestCase):
    def test_hours_and_minutes(self):
        result = parse_duration("1h30m")
        self.assertEqual(result, 5400)
        self.assertIs(type(result), int)

    def test_single_unit(self):
        self.assertEqual(parse_duration("2h"), 7200)
        self.assertEqual(parse_duration("15m"), 900)
        self.assertEqual(parse_duration("45s"), 45)

    def test_all_three_units(self):
        self.assertEqual(parse_duration("1h2m3s"), 3723)
        self.assertEqual(parse_duration("0h0m5s"), 5)
        self.assertEqual(parse_duration("0s"), 0)

    def test_large_numbers(self):
        self.assertEqual(parse_duration("90m"), 5400)
        self.assertEqual(parse_duration("3600s"), 3600)
        self.assertEqual(parse_duration("100h"), 360000)

    def test_refuses_units_out_of_order(self):
        for text in ("30m1h", "1s1m", "1h1h"):
            with self.subTest(text=text), self.assertRaises(ValueError):
                parse_duration(text)

    def test_refuses_fractions_and_signs(self):
        for text in ("1.5h", "0.5m", "-1h", "+1h"):
            with self.subTest(text=text), self.assertRaises(ValueError):
                parse_duration(text)

    def test_refuses_missing_units_and_junk(self):
        for text in ("10", "1h30", "", "h", " 1h", "1h 30m", "1H"):
            with self.subTest(text=text), self.assertRaises(ValueError):
                parse_duration(text)


if __name__ == "__main__":
    unittest.main()
