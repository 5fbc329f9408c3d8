"""Generates ../snippet_cases.rs: one-line templates rendered by transformers'
own Jinja2 environment (see reference.py). Run on a developer machine:

    python gen_snippets.py > ../snippet_cases.rs
"""
import json

import reference

BASE = {
    "t": True, "f": False, "n": None, "i": 42, "neg": -7, "zero": 0,
    "fl": 1.5, "whole": 1.0, "tiny": 1e-05, "tiny2": 2.5e-08, "bigf": 1e16, "bigf15": 1e15,
    "small": 0.0001, "third": 0.3333333333333333, "negzero": -0.0, "huge": 1e100,
    "u64": 18446744073709551615, "i64max": 9223372036854775807, "i64min": -9223372036854775808,
    "s": "Hello World", "q1": "it's", "q2": 'say "hi"', "q3": "both ' and \"",
    "ctrl": "a\n\tb\r\\c\x00\x1f\x7f\x08\x0c", "nbsp": "a\u00a0b\u200bc\u2028d\u00ad",
    "emoji": "\U0001F600\u00e9\u4e2d", "ws": "\x1c\x1d hi there\x1e\x1f",
    "uws": "\u3000\u2003 x \u0085\u00a0", "sigma": "\u039f\u0394\u03a5\u03a3\u03a3\u0395\u038e\u03a3",
    "dz": "\u01c6ungla \u00df \ufb01x", "lines": "a\nb\r\nc\rd\x0be\x0cf\x1cg\u2028h\n",
    "tabs": "a\tbc\td\n\tx", "empty": "", "spaces": "   ",
    "lst": [1, "a", None, True, 1.5], "strs": ["b", "A", "c", "a"], "nums": [3, 1, 2],
    "d": {"a": None, "b": [1, 2], "c": {"x": 1.0}}, "dd": {"b": 1, "a": 2, "C": 3},
    "items_d": {"items": 1, "keys": 2, "values": 3, "get": 4, "copy": 5},
    "msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo", "n": 2}],
    "nested": [[1, [2, [3]]], {"k": [{}]}], "empty_l": [], "empty_d": {},
    "html": "<a href='x'>&\"</a>", "path": "/a b/c?d=e&f",
    "uni_key": {"\u00e9": "\u4e2d", "k": "\U0001F600"},
    # int()/float() strip ASCII and Unicode whitespace but not U+001C..U+001F, and read Unicode digits.
    "num_ws": ["\x1c5", "5\x1f", "\x855", "\xa05\u3000", "\u200b5", "\u0665", "\x1c5\xa0", "\t5\x0b",
               "\u0661.\u0665", "1_0.5", "1_.5", " -0_7 "],
    "np_list": ["\u200b", "\u00a0", "\x7f", 1e-05, 1e16, -0.0, {"k": "\u2028"}],
    "tool": {"type": "function", "function": {"name": "get_weather", "description": "Get <weather> & stuff", "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "n": {"type": "integer", "default": 1.0}}, "required": ["city"]}}},
}

SNIPPETS = [
    # --- printing: Python str() of every kind
    "{{ t }}|{{ f }}|{{ n }}|{{ i }}|{{ neg }}|{{ zero }}",
    "{{ fl }}|{{ whole }}|{{ tiny }}|{{ tiny2 }}|{{ bigf }}|{{ bigf15 }}|{{ small }}|{{ third }}|{{ negzero }}|{{ huge }}",
    "{{ u64 }}|{{ i64max }}|{{ i64min }}|{{ u64 + 1 }}|{{ i64min - 1 }}|{{ i64max * 2 }}",
    "{{ 1e-5 }}|{{ 1e16 }}|{{ 1.0 }}|{{ 10/4 }}|{{ 4/2 }}|{{ 7//2 }}|{{ -7//2 }}|{{ -7 % 3 }}|{{ 2**10 }}|{{ 0.1+0.2 }}",
    "{{ 1.5e300 * 1e10 }}|{{ 123456789.123 }}|{{ 0.000123 }}|{{ 1/3 }}|{{ 2.0**0.5 }}|{{ 100000000000000000.0 }}",
    "{{ s }}|{{ q1 }}|{{ q2 }}|{{ q3 }}",
    "{{ [s, q1, q2, q3] }}",
    "{{ [ctrl] }}|{{ [nbsp] }}|{{ [emoji] }}|{{ [sigma] }}",
    "{{ lst }}|{{ d }}|{{ nested }}|{{ empty_l }}|{{ empty_d }}",
    "{{ (1, 2) }}|{{ (1,) }}|{{ () }}|{{ [(1, 'a')] }}",
    "{{ {'a': none, 'b': true, 1: 2.5} }}",
    "{{ msgs }}",
    "{{ tool }}",
    "{{ uni_key }}",
    "{{ lst|string }}|{{ t|string }}|{{ n|string }}|{{ fl|string }}|{{ tiny|string }}|{{ d|string }}",
    "{{ 'a' ~ n }}|{{ 'a' ~ t }}|{{ 'a' ~ i }}|{{ 'a' ~ [1, 'b'] }}|{{ 'a' ~ {'k': none} }}",
    "[{{ missing }}]|[{{ d.missing }}]|[{{ d['missing'] }}]|[{{ msgs[5] }}]",
    "{{ missing.attr }}",
    "{{ missing['x'] }}",
    "{{ n.attr }}",
    "{{ tools is defined }}|{{ tools is none }}|{{ tools is not none }}|{{ documents is defined }}|{{ documents is none }}|{% if tools %}y{% else %}n{% endif %}",
    "{{ add_generation_prompt }}|{{ missing is defined }}|{{ missing is undefined }}|{{ n is defined }}|{{ n is none }}",
    "{{ '\\u00e9\\n\\t\\x41\\'' }}|{{ \"\\\"q\\\"\" }}|{{ '\\\\' }}",
    "{{ 'ab' * 3 }}|{{ [1] * 2 }}|{{ 'a' in 'cat' }}|{{ 'a' in d }}|{{ 'x' in d }}|{{ 1 in nums }}|{{ {'a': 1} == {'a': 1} }}",
    "{{ d.items() }}|{{ d.keys() }}|{{ d.values() }}",
    "{{ 'a' ~ d.keys() }}",
    # --- whitespace control (trim_blocks + lstrip_blocks)
    "  {% if true %}\n  x\n  {% endif %}\nend",
    "a\n  {%- if true -%}\n  b  \n  {%- endif %}\nc",
    "{% for x in nums %}\n  {{ x }}\n{% endfor %}\n",
    "  {%+ if true %}x{% endif %}\n  {# c #}\ny\n",
    "{% if true %}a{% endif +%}\nb",
    "{% macro m(a, b='d') %}\n  [{{ a }}{{ b }}]\n{% endmacro %}\n{{ m(1) }}{{ m(2, b=3) }}",
    "line1\n\n{{- ' x ' -}}\n\nline2",
    "{% raw %}{{ not }}{% endraw %}\n",
    # --- strip / split / Python whitespace
    "[{{ ws|trim }}]|[{{ ws.strip() }}]|[{{ ws.lstrip() }}]|[{{ ws.rstrip() }}]|{{ ws.split() }}",
    "[{{ uws|trim }}]|[{{ uws.strip() }}]|{{ uws.split() }}",
    "[{{ '\\nab\\n'.strip('\\n') }}]|[{{ 'xxaxx'.strip('x') }}]|[{{ 'abcba'.strip('ab') }}]|[{{ 'aab'.lstrip('a') }}]|[{{ 'baa'.rstrip('a') }}]|[{{ ' a '.strip(none) }}]",
    "[{{ '12foo12'|trim('12') }}]|[{{ 5|trim }}]|[{{ n|trim }}]",
    "{{ 'a,b,,c'.split(',') }}|{{ 'a,b,c'.split(',', 1) }}|{{ '  a  b  c  '.split(none, 1) }}|{{ '  a  b  c  '.split(maxsplit=1) }}|{{ ''.split() }}|{{ ''.split(',') }}",
    "{{ 'a,b,c'.rsplit(',', 1) }}|{{ '  a  b  c  '.rsplit(none, 1) }}|{{ 'a b c'.rsplit() }}|{{ 'a.b.c'.rsplit('.') }}",
    "{{ 'x'.split('') }}",
    "{{ lines.splitlines() }}|{{ lines.splitlines(true) }}|{{ ''.splitlines() }}",
    # --- case
    "{{ q1.title() }}|{{ 'hello world'.title() }}|{{ dz.title() }}|{{ sigma.title() }}|{{ 'aBC dEF'.title() }}|{{ '1st 2nd'.title() }}",
    "{{ q1|title }}|{{ 'hello-world(x)y'|title }}|{{ dz|title }}|{{ 'a_b c.d'|title }}|{{ sigma|title }}",
    "{{ sigma.lower() }}|{{ sigma|lower }}|{{ dz.upper() }}|{{ dz|upper }}|{{ 'İ'.lower() }}|{{ 'ǅ'.lower() }}",
    "{{ dz.capitalize() }}|{{ 'hELLO'|capitalize }}|{{ 'ß'.capitalize() }}|{{ 'Hello World'.swapcase() }}|{{ 'ß'.swapcase() }}|{{ 'Straße'.casefold() }}",
    "{{ ''.isdigit() }}{{ '123'.isdigit() }}{{ '½'.isdigit() }}{{ '½'.isnumeric() }}{{ '²'.isdigit() }}{{ '²'.isdecimal() }}{{ '١٢'.isdecimal() }}",
    "{{ 'abc'.isalpha() }}{{ ''.isalpha() }}{{ 'a1'.isalnum() }}{{ ' '.isspace() }}{{ ''.isspace() }}{{ '\\x1c'.isspace() }}{{ 'Ⅻ'.isalpha() }}",
    "{{ 'abc'.islower() }}{{ 'aBc'.islower() }}{{ '1a'.islower() }}{{ '1'.islower() }}{{ 'ABC'.isupper() }}{{ 'Hello World'.istitle() }}{{ 'Hello world'.istitle() }}{{ ''.istitle() }}",
    "{{ 'abc'.isascii() }}{{ 'é'.isascii() }}{{ ''.isascii() }}{{ 'a\\u200b'.isprintable() }}{{ 'ab'.isprintable() }}",
    # --- other str methods
    "{{ s.startswith('Hell') }}{{ s.startswith(('x', 'He')) }}{{ s.startswith('World', 6) }}{{ s.endswith('ld') }}{{ s.endswith('Hello', 0, 5) }}{{ s.startswith('') }}",
    "{{ s.find('o') }}|{{ s.rfind('o') }}|{{ s.find('o', 5) }}|{{ s.find('z') }}|{{ s.find('') }}|{{ s.find('', 50) }}|{{ emoji.find('中') }}|{{ s.index('W') }}|{{ s.rindex('o') }}",
    "{{ s.index('z') }}",
    "{{ s.count('o') }}|{{ s.count('') }}|{{ 'aaaa'.count('aa') }}|{{ s.count('o', 5) }}|{{ s.count('l', 0, 4) }}",
    "{{ s.replace('o', '0') }}|{{ s.replace('o', '0', 1) }}|{{ 'abc'.replace('', '-') }}|{{ 'abc'.replace('', '-', 2) }}|{{ s.replace('l', '', -1) }}",
    "{{ ', '.join(strs) }}|{{ ''.join(['a', 'b']) }}|{{ '-'.join('abc') }}|{{ '-'.join(d) }}",
    "{{ '-'.join(nums) }}",
    "[{{ 'ab'.center(7) }}]|[{{ 'ab'.center(7, '*') }}]|[{{ 'abc'.center(6) }}]|[{{ 'abc'.center(8, '-') }}]|[{{ 'ab'.center(1) }}]|[{{ 'a'.center(4) }}]",
    "[{{ 'ab'.ljust(5, '.') }}]|[{{ 'ab'.rjust(5) }}]|[{{ '42'.zfill(5) }}]|[{{ '-42'.zfill(5) }}]|[{{ '+x'.zfill(4) }}]|[{{ 'abc'.zfill(2) }}]",
    "{{ 'a=b=c'.partition('=') }}|{{ 'a=b=c'.rpartition('=') }}|{{ 'abc'.partition('=') }}|{{ 'abc'.rpartition('=') }}",
    "{% set a, b, c = 'k: v'.partition(': ') %}{{ a }}/{{ b }}/{{ c }}",
    "{{ 'prefix_x'.removeprefix('prefix_') }}|{{ 'x.py'.removesuffix('.py') }}|{{ 'x'.removeprefix('y') }}",
    "[{{ tabs.expandtabs() }}]|[{{ tabs.expandtabs(4) }}]|[{{ tabs.expandtabs(0) }}]",
    "{{ '{} and {}'.format('a', 1) }}|{{ '{0}{1}{0}'.format('x', 'y') }}|{{ '{name}!'.format(name='n') }}",
    "{{ 'hello'[1:3] }}|{{ 'hello'[::-1] }}|{{ 'hello'[-2:] }}|{{ 'hello'[10:] }}|{{ 'hello'[1] }}|{{ 'hello'[-1] }}|{{ nums[::-1] }}|{{ nums[1:] }}|{{ nums[-5:1] }}|{{ emoji[1:] }}",
    "{{ 'hello'[::2] }}|{{ nums[::2] }}|{{ 'hello'[4:1:-1] }}",
    # --- dict and list methods
    "{% for k, v in items_d.items() %}{{ k }}={{ v }};{% endfor %}|{{ items_d.get('items') }}|{{ items_d.keys()|list }}|{{ items_d.values()|list }}",
    "{{ items_d.items() }}|{{ items_d.items()|length }}|{{ 'items' in items_d.keys() }}|{{ items_d.items()|list }}",
    "{{ d.get('a') }}|{{ d.get('zz') }}|{{ d.get('zz', 5) }}|{{ d.get('b')[1] }}|{{ d.copy() }}",
    "{% for k in d %}{{ k }}{% endfor %}|{% for k, v in d|items %}{{ k }}:{{ v }},{% endfor %}|{{ d|items|list }}",
    "{{ nums.index(2) }}|{{ nums.count(1) }}|{{ lst.index(none) }}|{{ strs.index('a', 1) }}",
    "{{ nums.index(9) }}",
    "{{ nums.append(4) }}",
    "{{ d.update({}) }}",
    "{{ d.pop('a') }}",
    # --- tests
    "{{ n is iterable }}{{ 'x' is iterable }}{{ d is iterable }}{{ 1 is iterable }}{{ missing is iterable }}{{ d.items() is iterable }}",
    "{{ d is sequence }}{{ 'x' is sequence }}{{ nums is sequence }}{{ 1 is sequence }}{{ n is sequence }}{{ missing is sequence }}{{ d.keys() is sequence }}",
    "{{ t is number }}{{ 1 is number }}{{ 1.5 is number }}{{ '1' is number }}{{ n is number }}",
    "{{ raise_exception is callable }}{{ 1 is callable }}{{ 'x' is callable }}{{ strftime_now is callable }}{{ namespace is callable }}",
    "{{ 'abc' is lower }}{{ 'aBc' is lower }}{{ 'ABC' is upper }}{{ 1 is lower }}{{ 'A1' is upper }}",
    "{{ d is mapping }}{{ nums is mapping }}{{ n is mapping }}{{ fl is float }}{{ i is integer }}{{ t is integer }}{{ t is boolean }}{{ 1 is boolean }}{{ 'a' is string }}{{ n is string }}",
    "{{ 3 is odd }}{{ 4 is even }}{{ 10 is divisibleby 5 }}{{ 10 is divisibleby(3) }}{{ t is true }}{{ 1 is true }}{{ f is false }}{{ 1 is eq 1 }}{{ 2 is gt 1 }}{{ 'a' is in 'cat' }}",
    "{{ 'trim' is filter }}{{ 'split' is filter }}{{ 'lines' is filter }}{{ 'callable' is test }}{{ 'int' is test }}{{ 'startingwith' is test }}{{ 'tojson' is filter }}",
    "{% if false %}{{ 'a b'|split }}{% endif %}ok",
    "{{ 'a b'|split }}",
    "{{ 'x' is startingwith 'x' }}",
    "{{ [1]|zip([2]) }}",
    "{{ debug() }}",
    "{{ 1|bool }}",
    # --- filters
    "{{ missing|length }}|{{ 'héllo'|length }}|{{ nums|length }}|{{ d|length }}|{{ d|count }}|{{ empty|length }}",
    "{{ n|length }}",
    "{{ 2.5|round }}|{{ 3.5|round }}|{{ 2.675|round(2) }}|{{ -0.5|round }}|{{ 1|round }}|{{ 1.5|round(0, 'floor') }}|{{ 1.25|round(1, 'ceil') }}|{{ 1234.5|round(-2) }}|{{ 0.125|round(2) }}",
    "{{ html|e }}|{{ html|escape }}|{{ 5|e }}|{{ n|e }}|[{{ missing|e }}]|{{ lst|e }}|{{ html|forceescape }}|{{ html|safe|e }}",
    "[{{ 'ab'|center(7) }}]|[{{ 'abc'|center }}]|{{ 'hello world, foo_bar 42 é!'|wordcount }}|{{ ''|wordcount }}",
    "{{ 'hello world this is long'|truncate(11) }}|{{ 'hello world this is long'|truncate(11, true) }}|{{ 'hello world this is long'|truncate(11, false, '..', 0) }}|{{ 'short'|truncate(3, leeway=5) }}|{{ 'hello world'|truncate(length=8, end='!', leeway=0) }}",
    "{{ 'hello'|truncate(2) }}",
    "{{ missing|default('d') }}|{{ n|default('d') }}|{{ ''|default('d', true) }}|{{ missing|d('x') }}|{{ 0|default(5, boolean=true) }}",
    "{{ '42'|int }}|{{ '3.7'|int }}|{{ 'abc'|int }}|{{ '0x1f'|int(base=16) }}|{{ ' 12 '|int }}|{{ '1_000'|int }}|{{ n|int }}|{{ t|int }}|{{ 3.9|int }}|{{ -3.9|int }}|{{ 'abc'|int(7) }}|{{ '1e3'|int }}|{{ '0b101'|int(0, 2) }}|{{ '+5'|int }}|{{ '--5'|int }}",
    "{{ '1.5'|float }}|{{ 'x'|float }}|{{ 2|float }}|{{ t|float }}|{{ n|float }}|{{ 'inf'|float }}|{{ 'nan'|float }}|{{ ' 1e-5 '|float }}|{{ 'x'|float(9) }}",
    "{{ num_ws|map('int')|list }}|{{ num_ws|map('float')|list }}",
    "{{ 'abc'|list }}|{{ d|list }}|{{ nums|list }}|{{ missing|list }}|{{ (1, 2)|list }}",
    "{{ n|list }}",
    "{{ nums|join(', ') }}|{{ lst|join }}|{{ msgs|join('|', attribute='role') }}|{{ 'abc'|join('-') }}|{{ d|join(',') }}|{{ [1.0, tiny, t]|join(' ') }}",
    "{{ n|join }}",
    "{{ d|dictsort }}|{{ dd|dictsort }}|{{ dd|dictsort(by='value') }}|{{ dd|dictsort(true) }}|{% for k, v in dd|dictsort(reverse=true) %}{{ k }}{{ v }}{% endfor %}",
    "{{ nums|first }}|{{ nums|last }}|{{ 'abc'|first }}|{{ 'abc'|last }}|{{ d|first }}|{{ nums|min }}|{{ nums|max }}|{{ strs|min }}|{{ strs|max }}|{{ strs|max(case_sensitive=true) }}",
    "{{ strs|sort }}|{{ strs|sort(case_sensitive=true) }}|{{ nums|sort(reverse=true) }}|{{ msgs|sort(attribute='role')|map(attribute='role')|list }}|{{ strs|unique|list }}",
    "{{ msgs|map(attribute='role')|list }}|{{ msgs|selectattr('role', 'equalto', 'user')|list }}|{{ msgs|rejectattr('role', 'eq', 'user')|map(attribute='content')|list }}|{{ nums|select('odd')|list }}|{{ nums|reject('odd')|list }}|{{ msgs|selectattr('n')|list|length }}",
    "{{ nums|map('string')|list }}|{{ strs|map('upper')|join }}|{{ [' a ', 'b ']|map('trim')|list }}",
    "{{ nums|sum }}|{{ nums|sum(start=10) }}|{{ msgs|sum(attribute='n') }}|{{ [1.5, 2]|sum }}|{{ -3|abs }}|{{ -2.5|abs }}",
    "{{ nums|batch(2)|list }}|{{ nums|batch(2, 0)|list }}|{{ [1,2,3,4,5]|slice(2)|list }}",
    "{% for g in msgs|groupby('role') %}{{ g.grouper }}:{{ g.list|length }};{% endfor %}",
    "[{{ 'a\\nb\\n\\nc'|indent }}]|[{{ 'a\\nb'|indent(2, true) }}]|[{{ 'a\\n\\nb'|indent(2, blank=true) }}]|[{{ 'a\\rb'|indent(1) }}]|[{{ 'a\\nb'|indent('> ') }}]|[{{ 'x\\n'|indent(first=true) }}]",
    "{{ s|replace('o', '0') }}|{{ s|replace('o', '0', 1) }}|{{ 5|replace('5', 'five') }}|{{ s|upper }}|{{ s|lower }}|{{ n|upper }}|{{ 1.0|string }}",
    "{{ d|pprint }}|{{ lst|pprint }}|{{ 'x'|pprint }}|{{ n|pprint }}",
    "{{ tool|pprint }}",
    "{{ path|urlencode }}|{{ {'a b': 'c&d', 'e': 1}|urlencode }}|{{ [('x', 'y z')]|urlencode }}|{{ 'é'|urlencode }}",
    "{{ '%s-%d'|format('a', 3) }}|{{ '%05.2f'|format(3.14159) }}|{{ '%r'|format('x') }}",
    "{{ 'abc'|reverse }}|{{ nums|reverse|list }}|{{ d|attr('a') }}|{{ 'hello world'|capitalize }}",
    # --- tojson
    "{{ tool|tojson }}",
    "{{ d|tojson }}|{{ lst|tojson }}|{{ nested|tojson }}|{{ empty_l|tojson }}|{{ empty_d|tojson }}",
    "{{ html|tojson }}|{{ emoji|tojson }}|{{ ctrl|tojson }}|{{ nbsp|tojson }}|{{ uni_key|tojson }}",
    "{{ emoji|tojson(ensure_ascii=true) }}|{{ ctrl|tojson(true) }}|{{ html|tojson(4) }}|{{ uni_key|tojson(ensure_ascii=True) }}",
    "{{ tool|tojson(indent=2) }}",
    "{{ d|tojson(indent=0) }}|{{ d|tojson(indent='\\t') }}|{{ [1, [], {}, [2]]|tojson(indent=1) }}|{{ d|tojson(none, 2) }}|{{ d|tojson(indent=true) }}|{{ nums|tojson(indent=-1) }}",
    "{{ d|tojson(separators=(',', ':')) }}|{{ d|tojson(indent=2, separators=(', ', ' = ')) }}|{{ nums|tojson(separators='ab') }}",
    "{{ dd|tojson(sort_keys=true) }}|{{ tool|tojson(sort_keys=true) }}|{{ {2: 'a', 1: 'b'}|tojson(sort_keys=true) }}|{{ {1: 'a', 1.5: 'b', true: 'c', none: 'd'}|tojson }}",
    "{{ {1: 'a', 'b': 2}|tojson(sort_keys=true) }}",
    "{{ fl|tojson }}|{{ whole|tojson }}|{{ tiny|tojson }}|{{ bigf|tojson }}|{{ u64|tojson }}|{{ i64min|tojson }}|{{ negzero|tojson }}|{{ 'nan'|float|tojson }}|{{ '-inf'|float|tojson }}|{{ n|tojson }}|{{ t|tojson }}|{{ (1, 'a')|tojson }}",
    "{{ missing|tojson }}",
    "{{ d.items()|tojson }}",
    "{{ {(1, 2): 3}|tojson }}",
    "{{ d|tojson(foo=1) }}",
    "{{ d|tojson(false, none, none, false, 5) }}",
    "{{ d|tojson(indent=1.5) }}",
    "{{ '\\u2028\\x7f'|tojson }}|{{ '\\u2028\\x7f'|tojson(ensure_ascii=1) }}|{{ '\\U0001F600'|tojson(ensure_ascii=true) }}",
    "{{ tools|tojson }}|{{ d|tojson|tojson }}|{{ d|tojson|e }}",
    # --- loops and control flow
    "{% for x in nums %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }};{% endfor %}",
    "{% for x in nums %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}|{% for x in nums %}{{ loop.cycle('a', 'b') }}{% endfor %}|{% for x in [1, 1, 2] %}{{ loop.changed(x) }}{% endfor %}",
    "{% for x in nums if x > 1 %}{{ x }}{{ loop.last }}{{ loop.length }};{% endfor %}",
    "{% for x in nums %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{% for x in empty_l %}x{% else %}empty{% endfor %}|{% for x in missing %}x{% else %}none{% endfor %}",
    "{% for x in nested recursive %}[{% if x is iterable and x is not string and x is not mapping %}{{ loop(x) }}{% else %}{{ x }}{% endif %}]{% endfor %}",
    "{% set ns = namespace(c=0, s='') %}{% for x in nums %}{% set ns.c = ns.c + x %}{% set ns.s = ns.s ~ x %}{% endfor %}{{ ns.c }}{{ ns.s }}",
    "{% set v = 1 %}{% for x in nums %}{% set v = x %}{{ v }}{% endfor %}{{ v }}",
    "{% for a, b in [(1, 2), [3, 4]] %}{{ a }}{{ b }}{% endfor %}|{% for k, v in {'x': 1}.items() %}{{ k }}{{ v }}{% endfor %}",
    "{% for m in msgs %}{{ m.role }}:{{ m['content'] }}{% if not loop.last %}, {% endif %}{% endfor %}",
    "{% if i > 40 and s.startswith('H') or false %}yes{% elif true %}no{% endif %}|{{ 'a' if t else 'b' }}|{{ 'a' if f }}|{{ 1 if none else 2 }}",
    "{% set x %}captured {{ i }}{% endset %}{{ x }}|{{ x|length }}",
    "{% with a = 5 %}{{ a }}{% endwith %}{{ a }}",
    "{% macro greet(name) %}Hi {{ name }}{% if caller is defined %}{{ caller() }}{% endif %}{% endmacro %}{% call greet('x') %}!{% endcall %}|{{ greet('y') }}",
    "{% filter upper %}abc {{ s }}{% endfilter %}",
    "{{ range(3)|list }}|{{ range(1, 10, 3)|list }}|{% for i in range(3) %}{{ i }}{% endfor %}|{{ range(5)|length }}",
    "{{ dict(a=1, b='x') }}|{{ namespace(a=1).a }}",
    "{% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}|{% set j = joiner('+') %}{{ j() }}x{{ j() }}y{{ j() }}",
    # --- comparisons and arithmetic
    "{{ 1 == 1.0 }}{{ 1 == true }}{{ 'a' < 'b' }}{{ [1, 2] == [1, 2] }}{{ (1, 2) == [1, 2] }}{{ none == none }}{{ 2 > 1.5 }}{{ 'a' != 'b' }}",
    "{{ 1 + 2.0 }}|{{ 3 - 5 }}|{{ 2 * 2.5 }}|{{ 7 % 2.5 }}|{{ -7 % 2 }}|{{ 2 ** -1 }}|{{ 10 // 3.0 }}|{{ [1] + [2] }}|{{ 'a' + 'b' }}",
    "{{ 1 / 0 }}",
    "{{ 'a' + 1 }}",
    "{{ -i }}|{{ not i }}|{{ i and 'x' }}|{{ 0 or 'y' }}|{{ none or 'z' }}|{{ empty_l or 'e' }}",
    # --- functions
    "{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d %H:%M:%S.%f') }}|{{ strftime_now('%B %d, %Y') }}",
    "{{ strftime_now('%A %a %B %b %h %j %U %W %V %G %g %u %w %C %y') }}",
    "{{ strftime_now('%c|%x|%X|%p|%I|%e|%D|%F|%R|%T|%r|%k|%l|%P|%n|%t|%%') }}",
    "{{ strftime_now('%Q|%z|%Z|%:z|%5|%') }}",
    "{{ strftime_now('%-d|%_m|%^a|%10A|%-I|%03d|%#b|%^B|%Ey|%Od|%-j|%_5d|%10B') }}",
    "{{ strftime_now('') }}|{{ strftime_now('plain é') }}",
    "{{ raise_exception('boom: ' ~ i) }}",
    "{% if i == 42 %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}",
    "{{ raise_exception(5) }}",
    "{{ strftime_now(5) }}",
    # --- source normalisation
    "a{% generation %}b{% endgeneration %}c",
    "{%- generation -%}\n x \n{%- endgeneration +%}\ny",
    "  {% generation %}\n  in\n  {% endgeneration %}\nout",
    "line1\r\nline2\r{% if true %}\r\nx\r\n{% endif %}\r\nend\r\n",
    "{{ 'a\r\nb'|length }}|{% set x = '{% generation %}' %}{{ x }}|{{ \"\\r\\n\"|length }}",
    "{# comment with {{ and %} #}ok{% raw %}{{ '\\U0001F600' }}{% endraw %}",
    "{{ '{:.2f}'.format(3.14159) }}|{{ '{:>5}|'.format('a') }}|{{ '{!r}'.format('x') }}|{{ '{0:03d}'.format(7) }}|{{ '{:,}'.format(1234567) }}|{{ '{}'.format(none) }}|{{ '{}'.format([1, 'a']) }}",
    "{{ '{}'.format(1e-5) }}",
    "{{ '{:+d}|{: d}|{:x}|{:#X}|{:#b}|{:o}|{:_b}|{:08.3f}|{:<6}|{:^7}|{:*>6}|{:=+8}'.format(5, 5, 255, 255, 5, 8, 255, 3.14159, 'ab', 'mid', 'r', -42) }}",
    "{{ '{:e}|{:.2e}|{:g}|{:.3g}|{:G}|{:%}|{:.1%}|{:.3}|{:.3}|{:.3}|{:10.4}|{:,.2f}|{}'.format(12345.678, 0.000123, 1e-7, 2.5, 1e20, 0.25, 0.123, 1.0, 100.0, 1234.5, 3.14159, 1234567.891, 1e16) }}",
    "{{ '{0[a]}|{0[b][1]}|{1.role}|{k[x]}'.format(d, msgs[0], k={'x': 9}) }}|{{ '{:>4}|{:d}|{}|{!r:>6}|{!s}'.format(t, f, none, 'q', [1.0]) }}",
    "{{ '{:{w}.{p}f}|{:{}}'.format(3.14159, 7, 'x', w=9, p=2) }}",
    "{{ '{} {0}'.format(1) }}",
    "{{ '{:d}'.format('x') }}",
    "{{ '{:>5}'.format(none) }}",
    "{{ '{'.format(1) }}",
    "{{ 'a}b'.format() }}",
    "{{ '{{}}{{{}}}'.format(1) }}|{{ '{:05}'.format(-3) }}|{{ '{:05}'.format('s') }}|{{ '{:.0f}'.format(0.5) }}|{{ '{:.0f}'.format(1.5) }}|{{ '{:n}'.format(1234) }}|{{ '{:c}'.format(97) }}",
    "{{ 'a' ~ lst }}|{{ 'a' ~ d }}|{{ 'a' ~ nested }}|{{ 'a' ~ np_list }}|{{ 'a' ~ msgs[0] }}|{{ 'a' ~ tool }}|{{ [np_list] }}|{{ np_list ~ '' }}",
    # --- second batch: edges
    "x\n",
    "x\n\n",
    "{% if true %}\nx\n{% endif %}\n\n",
    "  {{ 'a' }}\n  {%- if true %} b{% endif %}\n",
    "{% for x in nums -%}\n {{ x }}\n{%- endfor %}",
    "{{ emoji.find('\u00e9', 1) }}|{{ emoji.startswith('\u00e9', 1) }}|{{ emoji.count('\u4e2d', -1) }}|{{ emoji[::-1] }}|{{ emoji|length }}|{{ emoji.center(7, '*') }}|{{ emoji.rjust(5, '\u00b7') }}",
    "{{ missing|string }}|{{ missing|upper }}|[{{ missing|trim }}]|{{ missing ~ 'x' }}|{{ missing is none }}|{{ missing == none }}|{{ n == none }}|{{ missing|list }}|{{ missing|join(',') }}",
    "{{ missing + 1 }}",
    "{% if missing.x %}a{% endif %}",
    "{{ (1, 2)|length }}|{{ 3|string|length }}|{{ 'a' * -1 }}|{{ 'abc'[1:] * 2 }}|{{ [1, 2] + [3] }}|{{ lst[1:3] }}|{{ lst[-1] }}",
    "{{ 2**64 }}|{{ 2**62 * 4 }}|{{ -(2**63) }}|{{ u64 // 3 }}|{{ u64 % 7 }}",
    "{{ 2**100 }}",
    "{% set ns = namespace(a=1, b='x') %}{{ ns }}|{{ ns is mapping }}|{{ ns.a }}|{{ ns|attr('b') }}",
    "{% set ns = namespace(a=1) %}{{ ns|tojson }}",
    "{{ d|dictsort(by='x') }}",
    "{{ [1, 'a']|sort }}",
    "{% for c in 5 %}x{% endfor %}",
    "{{ msgs|sort(attribute='role,content')|map(attribute='content')|list }}|{{ [[2, 'b'], [1, 'c'], [1, 'a']]|sort }}|{{ [3, 1.5, true]|sort }}|{{ ['b', 'A', 'a', 'B']|sort(reverse=true) }}",
    "{{ msgs|sort(attribute='n')|length }}",
    "{{ ['1', '2']|map('int')|sum }}|{{ nums|map('float')|list }}|{{ 'x'|replace('x', 1) }}|{{ [none, 1]|map('string')|list }}",
    "{% for k, v in d.items() if v %}{{ k }}{% endfor %}|{% for v in d.values() %}{{ v is none }}{% endfor %}|{{ d.keys()|join('+') }}|{{ d.items()|map('first')|list }}",
    "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{{ n }}{% endmacro %}{{ f(3) }}",
    "{% macro boom() %}{{ raise_exception('inside macro') }}{% endmacro %}{{ boom() }}",
    "{{ msgs[0].get('content') }}|{{ msgs[0]['role']|upper }}|{{ d['b'][0] }}|{{ {'a': 1}.items()|list }}|{{ tool.function.parameters.properties|items|list }}",
    "{{ '%.2f'|format(1.005) }}|{{ '%g'|format(0.0001) }}|{{ '%g'|format(1e-5) }}|{{ '%10.3e'|format(12345.678) }}|{{ '%x'|format(255) }}|{{ '%#o'|format(8) }}|{{ '%+d'|format(5) }}|{{ '% d'|format(5) }}|{{ '%-5s|'|format('ab') }}|{{ '%05d'|format(-42) }}|{{ '%c'|format(65) }}|{{ '%(a)s-%(b)r'|format(a=1, b='x') }}|{{ '%5.1s|'|format('abc') }}",
    "{{ '%g'|format(123456789) }}|{{ '%G'|format(1e-10) }}|{{ '%#g'|format(1) }}|{{ '%.3g'|format(2.5) }}|{{ '%e'|format(0) }}|{{ '%f'|format(1e20) }}|{{ '%s %s'|format(t, n) }}|{{ '%d%%'|format(50) }}|{{ '%.0f'|format(2.5) }}|{{ '%i'|format(3.99) }}",
    "{{ '%s'|format() }}",
    "{{ '%d'|format('x') }}",
    "{{ '%s'|format(1, 2) }}",
    "{{ strftime_now('%G-W%V-%u %U %W %j') }}",
    "{{ 'Ǆ'.title() }}{{ 'ǆ'.capitalize() }}{{ 'ﬁ'.upper() }}{{ 'ŉ'.upper() }}{{ 'ΐ'.upper() }}{{ 'ß'|title }}|{{ 'σς'.upper() }}|{{ 'ΑΣ ΒΣ.'.lower() }}|{{ 'Σ'.lower() }}|{{ 'AΣb'.lower() }}",
    "{{ 'ǅungla'.istitle() }}{{ 'ǅ'.isupper() }}{{ 'ǅ'.islower() }}{{ 'Ⅷ'.isupper() }}{{ 'ⅷ'.lower() }}{{ 'ǅ'.swapcase() }}{{ 'ﬀ'.swapcase() }}",
    "{{ '\\x1c'|trim|length }}|{{ '\\x1f a \\x1f'.split() }}|{{ 'a\\x85b'.split() }}|{{ 'a\\u200bb'.split() }}|{{ 'a\\x1cb'.splitlines() }}|{{ '\\u2028x'.strip()|length }}",
    "{{ 'a\\\\b' }}|{{ 'x\\/y' }}|{{ 'tab\\there' }}|{{ 'bell\\a'|length }}|{{ 'vt\\v'|length }}|{{ '\\101\\x42\\u0043\\U00000044' }}|{{ 'unknown\\q' }}|{{ 'é\\tü' }}",
    "{{ \"line\\\ncontinued\" }}",
    "{{ 'oct\\777'|length }}|{{ 'oct\\777' }}",
    "{{ lst|tojson(indent=2, separators=(',', ': ')) }}|{{ [(1, 2)]|tojson }}|{{ {'\u00e9': ['\u4e2d']}|tojson(ensure_ascii=true, indent=1) }}",
    "{{ '{' ~ '}' }}|{{ '{{' }}|{{ \"}}\" }}|{{ {'a': {'b': 1}}['a']['b'] }}",
    "{% set x = {'k': {'n': [1, {'m': 2}]}} %}{{ x }}|{{ x|tojson }}",
    "{{ 1 is divisibleby 0 }}",
    "{{ 3.0 is odd }}|{{ 4.0 is even }}|{{ 2.5 is odd }}|{{ t is odd }}|{{ i is sameas 42 }}|{{ n is sameas none }}",
    "{{ nums|select('gt', 1)|list }}|{{ nums|select|list }}|{{ [0, 1, '', 'a', none]|select|list }}|{{ msgs|selectattr('role', 'in', ['user'])|list|length }}|{{ strs|reject('lower')|list }}",
    "{{ msgs|map(attribute='missing', default='dflt')|list }}|{{ msgs|map(attribute='missing')|list }}|{{ [[1, 2], [3]]|map('length')|list }}|{{ [[1, 2], [3]]|map('join', '-')|list }}",
    "{{ strs|unique(case_sensitive=true)|list }}|{{ msgs|unique(attribute='role')|map(attribute='role')|list }}|{{ strs|min(case_sensitive=true) }}|{{ msgs|max(attribute='role')|tojson }}",
    "{{ nums|first(2) }}",
    "{{ 'abc'|batch(2)|list }}|{{ range(7)|slice(3, 'x')|list }}|{{ range(3)|map('string')|join }}",
    "{{ tools is iterable }}|{{ tools is sequence }}|{{ tools|default('dflt') }}|{{ tools|tojson }}|{{ tools|string }}|{% if not tools %}empty{% endif %}",
    "{{ tools|length }}",
    "{{ dict(d, z=1) }}|{{ dict(**d) if false else 'ok' }}",
    "{{ 'a' in none }}",
    "{% set content = '' %}{% for m in msgs %}{% set content = content + m.content %}{% endfor %}[{{ content }}]",
    "{% set ns = namespace(parts=[]) %}{% for m in msgs %}{% set ns.parts = ns.parts + [m.role] %}{% endfor %}{{ ns.parts }}|{{ ns.parts|join(',') }}",
    "{{ msgs|groupby('role')|list|length }}|{% for g, items in msgs|groupby('role') %}{{ g }}={{ items|length }};{% endfor %}",
    "{{ 'Hello World'|wordcount }}|{{ 'one-two three_four  5'|wordcount }}|{{ 'x'|center(4) }}|{{ 'a b c'|title }}|{{ 'a\\tb'|title }}|{{ '\u00e9t\u00e9 fran\u00e7ais'|title }}",
    "{{ tabs|indent(2) }}|{{ ''|indent }}|{{ 'a'|indent(width=3, first=true) }}|{{ lines|indent(1) }}",
    "{{ 'A B'|lower|replace(' ', '_') }}|{{ s|truncate(5) }}|{{ s|truncate(5, leeway=0) }}|{{ 'aaaaaaaaaaaa bbbb'|truncate(10, leeway=0) }}",
]

# Where Jinja2 raises and minijinja renders, and nothing here can change it:
# the VM iterates None as empty and orders mismatched types without asking a
# filter or test. SGLang refuses these requests; the guard counts them.
KNOWN_DIVERGENT = [
    "{% for t in tools %}x{% endfor %}end",
    "{% for m in none %}x{% endfor %}end",
    "{{ none < 1 }}",
    "{{ 'a' < 1 }}",
    "{{ [1, 2] < 'a' }}",
]

# Snippets that need their own tools/documents.
SPECIAL = [
    ("{{ tools is none }}|{{ tools|length }}|{% for t in tools %}{{ t.function.name }}{% endfor %}|{{ tools|tojson }}",
     {"tools": [BASE["tool"]]}),
    ("{% if tools is iterable and tools|length > 0 %}T{% else %}F{% endif %}", {}),
    ("{% if tools is not none %}{{ tools[0]['type'] }}{% endif %}|{{ documents|tojson }}",
     {"tools": [{"type": "function"}], "documents": [{"title": "t", "text": "x"}]}),
    ("{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}",
     {"special_tokens": [("bos_token", "<s>"), ("eos_token", "</s>")], "add_generation_prompt": True}),
    ("{{ bos_token }}|{{ eos_token }}",
     {"special_tokens": [("bos_token", "<s>"), ("eos_token", "</s>")], "extra": {"bos_token": ""}}),
]


def rust_lit(s):
    out = ['"']
    for ch in s:
        c = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif 0x20 <= c < 0x7F:
            out.append(ch)
        else:
            out.append(f"\\u{{{c:x}}}")
    out.append('"')
    return "".join(out)


def main():
    print("// @generated by testdata/gen_snippets.py: expected outputs are what")
    print("// transformers 5.19.0 / Jinja2 3.1.6 (CPython 3.11.7) render for each")
    print("// template. `None` means Jinja2 raised; its error is the trailing comment.")
    print()
    print(f"pub const BASE_CONTEXT: &str = {rust_lit(json.dumps(BASE, ensure_ascii=False))};")
    print()
    print("pub const SNIPPETS: &[(&str, Option<&str>)] = &[")
    for src in SNIPPETS:
        kind, text = reference.render(src, extra=BASE)
        if kind == "ok":
            print(f"    ({rust_lit(src)}, Some({rust_lit(text)})),")
        else:
            print(f"    // {text.splitlines()[0] if text else ''}")
            print(f"    ({rust_lit(src)}, None),")
    print("];")
    print()
    print("/// Jinja2 raises (error in the comment); minijinja renders.")
    print("pub const KNOWN_DIVERGENT: &[&str] = &[")
    for src in KNOWN_DIVERGENT:
        kind, text = reference.render(src, extra=BASE)
        assert kind == "err", src
        print(f"    // {text}")
        print(f"    {rust_lit(src)},")
    print("];")
    print()
    print("/// (template, context JSON with messages/tools/documents/special_tokens/extra/add_generation_prompt, expected)")
    print("pub const SPECIAL: &[(&str, &str, Option<&str>)] = &[")
    for src, ctx in SPECIAL:
        kind, text = reference.render(
            src,
            tools=ctx.get("tools"),
            documents=ctx.get("documents"),
            add_generation_prompt=ctx.get("add_generation_prompt", False),
            special_tokens=ctx.get("special_tokens", ()),
            extra=ctx.get("extra"),
        )
        exp = f"Some({rust_lit(text)})" if kind == "ok" else "None"
        if kind != "ok":
            print(f"    // {text}")
        print(f"    ({rust_lit(src)}, {rust_lit(json.dumps(ctx, ensure_ascii=False))}, {exp}),")
    print("];")


if __name__ == "__main__":
    main()
