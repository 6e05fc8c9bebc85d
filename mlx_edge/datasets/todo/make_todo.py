#!/usr/bin/env python3
"""Generate the bundled to-do classification set (train/dev/test JSONL).

Short to-do items / notes as typed into a phone app, labelled with one of six
categories (work, life, study, health, finance, travel), in simplified Chinese
("zh") and English ("en").

The texts come from hand-written templates with slot fillers plus hand-written
whole sentences, all written for this project.  Everything is driven by one
fixed seed, so running the script twice produces byte-identical files.

    python mlx_edge/datasets/todo/make_todo.py

Standard library only.  See README.md next to this file for the labelling rules.
"""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

SEED = 20240611
OUT_DIR = Path(__file__).resolve().parent

LABELS = ("work", "life", "study", "health", "finance", "travel")
LANGS = ("en", "zh")
SPLIT_SIZES = {"train": 3000, "dev": 600, "test": 600}

# Mild, fixed class imbalance ("roughly balanced", all well within +-15%).
CLASS_WEIGHT = {"work": 1.06, "life": 1.04, "study": 0.99, "health": 1.00, "finance": 0.97, "travel": 0.94}

# Template hold-out: a share of each (label, lang) template list never appears
# in train; half of those are dev-only, half test-only.  Dev/test items are
# drawn from those held-out templates with probability P_HELDOUT, so the eval
# splits also measure generalisation to unseen phrasings.
HELDOUT_TEMPLATE_FRAC = 0.25
P_HELDOUT = 0.30
# Hand-written whole sentences are each used exactly once, split like this.
WHOLE_SPLIT_SHARE = {"train": 0.6, "dev": 0.2, "test": 0.2}

# ---------------------------------------------------------------------------
# Slot fillers.  A slot {name} in a template is replaced by a random choice
# from FILLERS[lang][name].  {n} and {q} are small numbers.
# Many fillers are deliberately shared between classes (people, days, cities,
# amounts), so that the class is carried by the rest of the sentence.
# ---------------------------------------------------------------------------
FILLERS = {
    "en": {
        # shared
        "person": [
            "Lisa",
            "Mike",
            "Sarah",
            "Tom",
            "Priya",
            "Chen",
            "Jake",
            "Emma",
            "Raj",
            "Anna",
            "David",
            "Kevin",
            "Maria",
            "Yuki",
            "Ben",
            "Olivia",
            "Sam",
            "Nina",
            "Carlos",
            "Hannah",
            "Omar",
            "Grace",
        ],
        "when": [
            "",
            "",
            "",
            "",
            "today",
            "tomorrow",
            "tonight",
            "on Monday",
            "on Tuesday",
            "Wednesday",
            "by Thursday",
            "on Friday",
            "Friday morning",
            "this weekend",
            "next week",
            "next Tuesday",
            "before noon",
            "at 3pm",
            "this afternoon",
            "on the 15th",
            "tmrw",
            "Sat",
            "end of month",
            "after lunch",
        ],
        "time": ["9am", "10:30", "3pm", "2:15pm", "7pm", "noon", "8:00", "4:30", "11am", "6pm", "9:45"],
        "city": [
            "Tokyo",
            "Osaka",
            "Seoul",
            "Paris",
            "London",
            "Berlin",
            "Chicago",
            "Seattle",
            "Austin",
            "Singapore",
            "Bangkok",
            "Lisbon",
            "Denver",
            "Boston",
            "Toronto",
            "Sydney",
            "Barcelona",
            "Kyoto",
            "Vancouver",
            "NYC",
            "Hanoi",
            "Mexico City",
        ],
        "bedtime": ["10pm", "10:30", "11", "11:30pm", "midnight", "10:45"],
        "amt": [
            "$20",
            "$45",
            "$120",
            "$300",
            "$1,200",
            "50 bucks",
            "$15.99",
            "$80",
            "€200",
            "$2k",
            "$60",
            "$500",
            "$35",
            "$250",
        ],
        "family": [
            "mom",
            "dad",
            "grandma",
            "my sister",
            "Jess",
            "the kids",
            "my wife",
            "my husband",
            "Aunt Linda",
            "Uncle Joe",
            "my brother",
            "grandpa",
        ],
        # work
        "doc": [
            "Q3 deck",
            "quarterly report",
            "budget proposal",
            "design doc",
            "sales forecast",
            "project plan",
            "meeting notes",
            "contract draft",
            "launch checklist",
            "status update",
            "OKR doc",
            "pitch deck",
            "SOW",
            "onboarding guide",
            "API spec",
            "release notes",
            "weekly report",
            "KPI dashboard",
            "postmortem",
        ],
        "meeting": [
            "Friday's standup",
            "the board meeting",
            "the all-hands",
            "the sprint review",
            "the client call",
            "Monday's sync",
            "the kickoff",
            "the QBR",
            "the retro",
            "the planning meeting",
        ],
        "client": [
            "Acme",
            "Globex",
            "the Initech team",
            "Contoso",
            "Northwind",
            "the Shopify team",
            "Henderson & Co",
            "the new client",
            "Umbrella Corp",
            "Stark Logistics",
        ],
        "project": [
            "the checkout flow",
            "Project Atlas",
            "the mobile app",
            "the billing service",
            "the data pipeline",
            "the website redesign",
            "the iOS release",
            "the CRM migration",
            "v2.3",
            "the search API",
            "the onboarding flow",
        ],
        "bug": [
            "login",
            "payment timeout",
            "memory leak",
            "CSV export",
            "crash-on-launch",
            "timezone",
            "null pointer",
            "double charge",
        ],
        "module": [
            "the auth module",
            "the parser",
            "the payment service",
            "utils.py",
            "the scheduler",
            "the export job",
        ],
        "metric": ["conversion", "churn", "sales", "DAU", "revenue", "NPS", "pipeline"],
        "vendor": ["catering", "AV", "printing", "venue", "swag"],
        "tool": ["Figma", "Slack", "JetBrains", "Zoom", "Adobe", "Notion", "GitHub"],
        "role": ["backend", "designer", "PM", "data analyst", "sales", "intern", "frontend"],
        "office_item": [
            "a second monitor",
            "a new keyboard",
            "printer toner",
            "a standing desk",
            "whiteboard markers",
            "name badges",
        ],
        # life
        "grocery": [
            "milk",
            "eggs",
            "bread",
            "bananas",
            "coffee beans",
            "rice",
            "chicken thighs",
            "paper towels",
            "dish soap",
            "tofu",
            "spinach",
            "oat milk",
            "avocados",
            "olive oil",
            "detergent",
            "toilet paper",
            "cat litter",
            "tomatoes",
            "yogurt",
            "pasta",
            "onions",
            "butter",
        ],
        "kid": ["Lily", "Max", "Ethan", "Mia", "Noah", "Zoe"],
        "kid_place": [
            "daycare",
            "school",
            "soccer practice",
            "piano lesson",
            "swim class",
            "the library",
            "Kumon",
            "ballet",
        ],
        "kid_subject": ["math", "spelling", "science project", "reading log", "fractions"],
        "kid_activity": ["swim lessons", "piano", "summer camp", "art class", "soccer", "Kumon", "coding camp"],
        "kid_stuff": ["notebooks", "crayons", "a backpack", "a lunchbox", "rain boots", "a calculator"],
        "room": ["kitchen", "bathroom", "garage", "fridge", "closet", "balcony", "basement", "kids' room"],
        "appliance": [
            "leaky faucet",
            "dishwasher",
            "bedroom light",
            "washing machine",
            "wifi router",
            "door lock",
            "AC",
            "garbage disposal",
            "heater",
        ],
        "restaurant": [
            "Nobu",
            "the Italian place",
            "Olive Garden",
            "that ramen spot",
            "Chez Marie",
            "the dim sum place",
            "the steakhouse",
        ],
        "pet": ["Biscuit", "the cat", "Luna", "the dog", "Mochi", "the puppy"],
        "store": ["Target", "IKEA", "Costco", "Zara", "the hardware store", "Uniqlo"],
        "return_item": ["jeans", "lamp", "shoes", "jacket", "blender", "rug"],
        "household": [
            "light bulbs",
            "trash bags",
            "a shower curtain",
            "AA batteries",
            "hangers",
            "a new mop",
            "storage bins",
            "dish towels",
        ],
        "dish": ["lasagna", "curry", "tacos", "stir fry", "dumplings", "soup", "mac and cheese", "fried rice"],
        "dish_bake": ["cookies", "banana bread", "brownies", "a pie"],
        "pickup": ["the post office", "the front desk", "the UPS store", "the parcel locker"],
        "gift": ["flowers", "a gift card", "a cake", "chocolates", "a photo album"],
        "salon": ["Supercuts", "the barber", "the salon"],
        "furniture": ["bookshelf", "bed frame", "desk", "wardrobe", "crib"],
        # study
        "subject": [
            "linear algebra",
            "organic chem",
            "statistics",
            "macroeconomics",
            "calculus",
            "data structures",
            "microbiology",
            "art history",
            "physics",
            "accounting",
            "Spanish",
            "psychology",
            "machine learning",
            "econometrics",
            "discrete math",
            "biology",
            "anatomy",
            "corporate finance",
        ],
        "textbook": [
            "Rudin",
            "the stats textbook",
            "CLRS",
            "Campbell Biology",
            "the econ reader",
            "Griffiths",
            "Strang",
            "the anatomy atlas",
        ],
        "exam": [
            "the midterm",
            "the final",
            "Friday's quiz",
            "the GRE",
            "the bar exam",
            "the MCAT",
            "the CPA exam",
            "finals",
        ],
        "cert": ["AWS", "PMP", "CFA", "JLPT N3", "TOEFL", "IELTS", "CPA", "driving theory", "Security+"],
        "prof": ["Smith", "Nguyen", "Garcia", "Hoffman", "Zhang", "Okafor"],
        "prof_topic": [
            "the extension",
            "my grade",
            "the thesis proposal",
            "a recommendation letter",
            "the final project",
            "the reading list",
        ],
        "platform": ["Canvas", "Blackboard", "Moodle", "Gradescope"],
        "course": [
            "CS229",
            "MIT 6.006",
            "the Coursera ML course",
            "Econ 101",
            "the Udemy Python course",
            "the online Japanese course",
            "Stats 110",
            "the edX finance course",
        ],
        "language": ["Japanese", "Spanish", "French", "Korean", "German", "Mandarin", "Italian"],
        "topic": [
            "eigenvalues",
            "regression",
            "photosynthesis",
            "supply and demand",
            "recursion",
            "derivatives",
            "thermodynamics",
            "the French Revolution",
            "hypothesis testing",
            "compound interest",
            "the immune system",
            "Bayes' rule",
        ],
        "cs_topic": ["graphs", "dynamic programming", "binary search", "trees", "sliding window"],
        "paper": ["attention", "ResNet", "BERT", "the assigned", "Dropout", "word2vec"],
        "scholarship": [
            "the Fulbright",
            "the merit scholarship",
            "the department fellowship",
            "the study abroad program",
        ],
        "skill": ["SQL", "Excel pivot tables", "React", "Photoshop", "pandas", "music theory", "Rust", "touch typing"],
        "thesis_task": [
            "lit review",
            "methods section",
            "fix citations",
            "send draft to advisor",
            "rerun the chapter 3 experiments",
            "abstract",
        ],
        "term": ["fall", "spring", "summer"],
        # health
        "medicine": [
            "ibuprofen",
            "vitamin D",
            "amoxicillin",
            "allergy meds",
            "Zyrtec",
            "melatonin",
            "metformin",
            "iron pills",
            "omega-3",
            "antibiotics",
            "Lipitor",
            "the inhaler",
            "probiotics",
            "Advil",
        ],
        "freq": ["", "after breakfast", "twice a day", "at 8pm", "with dinner", "before bed", "every 6 hours"],
        "pharmacy": ["CVS", "Walgreens", "the pharmacy", "Rite Aid"],
        "exercise": [
            "30 min run",
            "5k jog",
            "yoga",
            "swim laps",
            "HIIT",
            "50 pushups",
            "cycling",
            "pilates",
            "squats 3x12",
            "brisk walk",
            "rowing 20 min",
            "plank 2 min",
        ],
        "fit_class": ["spin", "yoga", "pilates", "boxing", "CrossFit", "barre", "aqua aerobics"],
        "symptom": [
            "the rash",
            "my knee",
            "the headaches",
            "the cough",
            "back pain",
            "insomnia",
            "the allergy",
            "heartburn",
            "the sore throat",
        ],
        "diet": ["low-carb", "high-protein", "keto", "low-sodium", "plant-based"],
        "supplement": [
            "protein powder",
            "vitamin C",
            "fish oil",
            "magnesium",
            "a foam roller",
            "electrolyte tabs",
            "creatine",
        ],
        "bodypart": ["knee", "lower back", "shoulder", "ankle", "hamstrings", "neck", "wrist"],
        "doctor": ["Patel", "Kim", "Lee", "Morgan", "Alvarez"],
        "specialist": ["cardiologist", "dentist", "eye doctor", "physical therapist", "dermatologist", "orthopedist"],
        "test": ["blood panel", "MRI on my knee", "cholesterol test", "skin check", "COVID test", "thyroid test"],
        "vice": ["sugar", "alcohol", "caffeine after 2pm", "late-night snacks", "soda"],
        "gear": ["running shoes", "a yoga mat", "resistance bands", "a heart-rate monitor", "a knee brace"],
        "race": ["5K", "half marathon", "charity run", "Tough Mudder", "10K"],
        # finance
        "bill": ["electric", "water", "internet", "phone", "gas", "credit card", "Amex", "cable", "HOA", "Visa"],
        "merchant": ["Amazon", "Uber", "Netflix", "Spotify", "Hulu", "DoorDash", "Apple", "the gym", "PayPal"],
        "stock": ["AAPL", "VOO", "Tesla", "NVDA", "MSFT", "the S&P fund", "VTI"],
        "bank": ["Chase", "the bank", "Wells Fargo", "Citi", "the credit union", "Schwab", "Fidelity"],
        "bank_issue": [
            "overdraft fee",
            "locked card",
            "wire transfer",
            "late fee",
            "fraud alert",
            "foreign transaction fee",
            "duplicate charge",
        ],
        "subscription": ["Netflix", "Spotify", "Adobe", "iCloud", "Disney+", "HBO", "the gym app", "Audible"],
        "insurance": ["car", "renter's", "life", "home", "health", "dental"],
        "shared": [
            "dinner",
            "concert tickets",
            "the Uber",
            "groceries",
            "the Airbnb",
            "pizza",
            "the gift for Jess",
            "the cabin",
            "drinks",
            "the team lunch",
        ],
        "claim": [
            "the dentist visit",
            "the ER bill",
            "the broken phone",
            "the car scratch",
            "the MRI",
            "the physio sessions",
        ],
        "tax_doc": ["W-2s", "1099s", "receipts", "last year's return", "the mortgage interest statement"],
        # travel
        "country": [
            "Japan",
            "Korea",
            "Thailand",
            "Italy",
            "France",
            "Mexico",
            "Vietnam",
            "Iceland",
            "Portugal",
            "Canada",
            "Peru",
        ],
        "airline": ["United", "Delta", "ANA", "JAL", "Southwest", "Emirates", "Air Canada"],
        "currency": ["yen", "euros", "baht", "won", "pesos", "pounds"],
        "landmark": [
            "Louvre",
            "Sagrada Familia",
            "teamLab",
            "Colosseum",
            "Disneyland",
            "Universal Studios",
            "Alhambra",
        ],
        "pack_item": [
            "sunscreen",
            "hiking boots",
            "chargers",
            "swimsuits",
            "a power bank",
            "warm layers",
            "the plug adapter",
        ],
        "lodging": ["Airbnb", "hostel", "ryokan", "hotel", "campsite"],
        "travel_gear": ["carry-on", "neck pillow", "packing cubes", "luggage lock", "TSA lock"],
        "island": ["Santorini", "Bali", "Catalina", "Jeju", "Capri"],
    },
    "zh": {
        # shared
        "person": [
            "王经理",
            "李总",
            "小张",
            "小李",
            "老陈",
            "张姐",
            "小王",
            "阿杰",
            "陈总",
            "赵磊",
            "周敏",
            "小刘",
            "Amy",
            "Kevin",
            "老周",
            "孙倩",
        ],
        "when": [
            "",
            "",
            "",
            "",
            "明天",
            "今晚",
            "周五",
            "下周一",
            "周末",
            "月底前",
            "今天下午",
            "明早",
            "后天",
            "这周",
            "周三晚上",
            "15号",
            "下个月",
            "明天上午",
            "今天",
            "周四之前",
        ],
        "time": ["九点", "10点半", "下午三点", "晚上七点", "中午", "8:30", "14:00", "下午四点半", "早上8点"],
        "city": [
            "上海",
            "北京",
            "成都",
            "杭州",
            "深圳",
            "厦门",
            "西安",
            "三亚",
            "昆明",
            "大理",
            "香港",
            "重庆",
            "青岛",
            "广州",
            "南京",
            "长沙",
            "武汉",
            "苏州",
            "哈尔滨",
            "桂林",
        ],
        "bedtime": ["十一点", "11点半", "12点", "十点半", "23:00"],
        "abroad": ["东京", "大阪", "首尔", "新加坡", "曼谷", "巴黎", "清迈", "伦敦", "悉尼", "京都", "吉隆坡", "罗马"],
        "amt": [
            "200块",
            "500元",
            "1200元",
            "3k",
            "88元",
            "2000",
            "45块",
            "1.5万",
            "300块钱",
            "6800",
            "99元",
            "800",
            "2万",
        ],
        "family": ["妈", "爸", "奶奶", "姥姥", "老婆", "老公", "姐姐", "弟弟", "婆婆", "岳父", "爷爷", "小姨"],
        # work
        "doc": [
            "季度报告",
            "周报",
            "项目方案",
            "需求文档",
            "合同草稿",
            "竞品分析",
            "预算表",
            "会议纪要",
            "述职报告",
            "测试报告",
            "产品原型",
            "数据报表",
            "投标书",
            "年终总结",
            "方案PPT",
            "复盘文档",
        ],
        "meeting": ["周会", "早会", "项目评审会", "客户会议", "季度复盘会", "部门例会", "启动会", "站会", "月度经营会"],
        "client": ["华为那边", "客户", "甲方", "阿里的对接人", "供应商", "合作方", "大客户", "代理商"],
        "project": [
            "新版App",
            "支付模块",
            "官网改版",
            "小程序",
            "数据平台",
            "CRM系统",
            "618活动",
            "会员系统",
            "双十一项目",
            "后台管理系统",
        ],
        "bug": ["登录", "支付超时", "闪退", "导出Excel", "内存泄漏", "页面白屏", "重复扣款"],
        "expense": ["机票", "酒店费用", "打车费", "餐费", "高铁票", "住宿费"],
        "tool": ["飞书", "Jira", "VPN", "企业微信", "GitLab", "数据库"],
        "role": ["前端", "产品经理", "设计", "运营", "销售", "实习生", "测试"],
        # life
        "grocery": [
            "牛奶",
            "鸡蛋",
            "面包",
            "大米",
            "酱油",
            "西红柿",
            "青菜",
            "猪肉",
            "水果",
            "纸巾",
            "洗洁精",
            "洗衣液",
            "酸奶",
            "葱姜蒜",
            "挂面",
            "咖啡豆",
            "豆腐",
            "排骨",
            "土豆",
        ],
        "kid": ["儿子", "女儿", "小宝", "朵朵", "豆豆", "大宝"],
        "kid_subject": ["数学", "语文", "英语", "手工"],
        "kid_activity": ["钢琴", "游泳", "美术", "围棋", "街舞", "英语", "编程"],
        "kid_stuff": ["文具", "书包", "水彩笔", "校服", "练习本", "跳绳"],
        "kid_form": ["春游回执", "试卷", "安全责任书", "作业本", "体检表"],
        "room": ["厨房", "卫生间", "阳台", "衣柜", "冰箱", "储物间", "书房"],
        "appliance": ["马桶", "热水器", "空调", "洗衣机", "灯泡", "门锁", "路由器", "水龙头", "油烟机"],
        "restaurant": ["海底捞", "楼下那家川菜馆", "外婆家", "西贝", "那家日料", "小区门口的烤鸭店"],
        "pet": ["狗狗", "猫", "团子", "旺财", "咪咪"],
        "pet_food": ["零食", "冻干", "罐头", "驱虫药", "新窝", "牵引绳"],
        "store": ["宜家", "优衣库", "超市", "山姆", "商场", "迪卡侬"],
        "return_item": ["裤子", "鞋", "台灯", "外套", "枕头", "电饭煲"],
        "household": ["纸巾", "垃圾袋", "收纳箱", "拖把", "床单", "衣架", "洗手液"],
        "dish": ["红烧肉", "番茄炒蛋", "饺子", "咖喱饭", "酸菜鱼", "可乐鸡翅"],
        "pickup": ["菜鸟驿站", "门卫", "快递柜", "小区门口"],
        "leisure": ["公园", "动物园", "商场", "游乐场", "海洋馆"],
        # study
        "subject": [
            "线性代数",
            "高数",
            "概率论",
            "大学物理",
            "有机化学",
            "英语",
            "微观经济学",
            "会计学",
            "数据结构",
            "马原",
            "计量经济学",
            "生物",
            "病理学",
            "财务管理",
            "操作系统",
        ],
        "exam": [
            "四级",
            "六级",
            "雅思",
            "托福",
            "考研",
            "期末考",
            "教资",
            "CPA",
            "驾照科目一",
            "日语N2",
            "软考",
            "期中考",
            "注会",
        ],
        "language": ["英语", "日语", "韩语", "法语", "德语", "西班牙语"],
        "course": ["吴恩达机器学习", "B站Python课", "慕课高数", "网易公开课", "Coursera的统计课", "考研数学网课"],
        "prof": ["导师", "张老师", "王教授", "辅导员", "助教", "李老师"],
        "prof_topic": ["开题的事", "成绩", "推荐信", "论文格式", "延期提交", "实习学分"],
        "thesis_task": ["开题报告", "改第二稿", "查重", "文献综述", "实验数据补一下", "格式调整", "摘要翻译"],
        "paper": ["Transformer", "ResNet", "导师推荐的那篇", "两篇综述", "BERT"],
        "skill": ["Python", "Excel函数", "PS", "剪辑", "SQL", "乐理"],
        "term": ["下学期", "这学期", "研一", "大三下"],
        "book": ["借的书", "参考书", "教材", "那两本专业书"],
        # health
        "medicine": [
            "布洛芬",
            "维生素D",
            "阿莫西林",
            "感冒药",
            "益生菌",
            "钙片",
            "鱼油",
            "降压药",
            "褪黑素",
            "中药",
            "眼药水",
            "过敏药",
            "胃药",
            "叶酸",
        ],
        "freq": ["饭后", "一天三次", "睡前", "早晚各一次", "空腹"],
        "body": ["膝盖", "肩膀", "甲状腺", "胃", "牙", "腰椎", "眼睛", "颈椎"],
        "exercise": ["跑步", "跳绳", "游泳", "瑜伽", "帕梅拉", "骑车", "快走", "普拉提", "平板支撑", "深蹲", "爬楼梯"],
        "duration": ["30分钟", "半小时", "5公里", "一小时", "1000个", "3组", "40分钟"],
        "department": ["皮肤科", "骨科", "眼科", "口腔科", "消化内科", "妇科", "心内科", "中医科", "耳鼻喉科"],
        "symptom": ["胃疼", "咳嗽", "腰疼", "过敏", "失眠", "膝盖", "湿疹", "头疼", "嗓子疼"],
        "vaccine": ["流感", "HPV", "乙肝", "狂犬", "带状疱疹"],
        "dose": ["第一针", "第二针", "第三针", "加强针"],
        "muscle": ["腿", "背", "胸", "肩", "核心", "臀"],
        "gear": ["跑鞋", "瑜伽垫", "弹力带", "体脂秤", "护膝", "筋膜枪"],
        "race": ["半马", "10公里跑", "城市马拉松", "夜跑活动"],
        "vice": ["奶茶", "宵夜", "油炸的", "甜食", "烧烤"],
        # finance
        "bank": ["招行", "工行", "建行", "浦发", "交行", "中行"],
        "utility": ["水电", "燃气", "物业", "话费", "宽带", "取暖"],
        "fund": ["指数基金", "黄金", "国债", "纳指ETF", "货币基金", "红利基金"],
        "subscription": ["爱奇艺", "腾讯视频", "网易云会员", "QQ音乐", "百度网盘", "Keep会员", "B站大会员"],
        "insurance": ["车险", "医疗险", "重疾险", "意外险", "寿险", "房屋险"],
        "claim": ["住院", "看牙", "门诊", "拍片子", "手术"],
        "stock": ["茅台", "腾讯", "宁德时代", "比亚迪", "招商银行"],
        "price": ["100块", "20", "50元", "300", "10块"],
        "shared": ["聚餐", "演唱会门票", "打车", "民宿", "生日礼物", "火锅", "团建", "KTV", "房租"],
        # travel
        "country": ["日本", "泰国", "韩国", "法国", "新加坡", "越南", "澳洲", "意大利", "马来西亚"],
        "currency": ["日元", "泰铢", "欧元", "港币", "韩元", "美金"],
        "landmark": ["故宫", "迪士尼", "环球影城", "兵马俑", "布达拉宫", "黄山", "长城"],
        "airline": ["国航", "东航", "南航", "春秋", "亚航", "海航"],
        "holiday": ["国庆", "五一", "春节", "端午", "元旦", "暑假"],
        "pack_item": ["防晒霜", "充电宝", "转换插头", "泳衣", "羽绒服", "雨伞"],
        "island": ["涠洲岛", "鼓浪屿", "长岛", "普陀山", "济州岛"],
    },
}

NUMBER_SLOTS = {"n": (2, 12), "q": (1, 4)}

# ---------------------------------------------------------------------------
# Templates, per (label, lang).  English templates start lowercase; casing is
# varied afterwards.
# ---------------------------------------------------------------------------
TEMPLATES = {
    ("work", "en"): [
        "email the {doc} to {person} {when}",
        "send {person} the {doc} before {meeting}",
        "finish the {doc} for {client}",
        "prep slides for the {client} meeting {when}",
        "review {person}'s PR for {project}",
        "fix the {bug} bug before the release",
        "1:1 with {person} at {time}",
        "set up a call with {client} about {project}",
        "update the {project} roadmap {when}",
        "follow up with {person} on the {doc}",
        "submit timesheet {when}",
        "book the big conference room for {meeting}",
        "pay the {vendor} invoice for the team offsite",
        "submit expense report for the {city} trip",
        "file reimbursement for the client dinner in {city}",
        "agenda for {meeting}",
        "draft the {doc} {when}",
        "ask {person} for the {metric} numbers",
        "deploy {project} to staging",
        "write unit tests for {module}",
        "reply to {client} about the contract renewal",
        "interview a {role} candidate at {time}",
        "write up notes from {meeting}",
        "sync w/ {person} re {project}",
        "renew the team {tool} license",
        "order {office_item} for the office",
        "read {person}'s {doc} before {meeting}",
        "prepare talking points for the {client} visit in {city}",
        "send the {city} office the updated {doc}",
        "approve {person}'s vacation request",
        "finalize the Q{q} marketing budget",
        "self-assessment for perf review due {when}",
        "onboard {person} onto {project}",
        "block focus time on the calendar {when}",
        "ping {person} about the {bug} ticket",
        "demo {project} at {meeting}",
        "schedule a meeting with {person} and {person}",
        "get legal sign-off on the {client} NDA",
        "hand over {project} to {person} before my vacation",
        "print handouts for the {client} workshop",
        "invoice {client} for last month's hours",
        "Q{q} {metric} numbers for {meeting}",
    ],
    ("work", "zh"): [
        "{when}把{doc}发给{person}",
        "跟{person}对一下{project}的进度",
        "准备{meeting}的PPT",
        "{when} review 一下{person}的PR",
        "修{bug}的bug，{when}要发版",
        "给{client}回邮件，确认合同细节",
        "{when}{time}开{meeting}",
        "写{doc}",
        "报销{city}出差的{expense}",
        "把{city}出差的发票交给财务",
        "订{time}的会议室",
        "更新{project}的排期",
        "跟{person}约个1on1",
        "{when}交周报",
        "催{person}交{doc}",
        "整理{meeting}的会议纪要",
        "{project}上线前做一遍回归测试",
        "{time}面试{role}候选人",
        "给新同事讲一下{project}",
        "审批{person}的年假申请",
        "部门Q{q}预算表{when}做完",
        "跟{client}约{when}拜访",
        "去{city}见客户之前准备好{doc}",
        "看一下{person}发的{doc}",
        "把{doc}同步到项目群里",
        "申请{tool}权限",
        "{when}跟{person}过一下需求",
        "发版前确认{project}的checklist",
        "给{client}报价，{when}",
        "{project}的数据拉一下给{person}",
        "{meeting}上讲一下{project}",
        "跟HR确认{role}的offer",
        "休假前把{project}交接给{person}",
        "{city}分公司的{doc}要改",
        "给{client}开发票，催回款",
        "跟{person}确认{city}展会的物料",
        "{doc}{when}定稿",
        "{meeting}改到{time}，通知大家",
    ],
    ("life", "en"): [
        "buy {grocery} and {grocery}",
        "groceries: {grocery}, {grocery}, {grocery}",
        "call {family} {when}",
        "pick up {kid} from {kid_place} at {time}",
        "book a table at {restaurant} for {family}'s birthday",
        "get a birthday present for {family}",
        "take out the trash {when}",
        "do laundry {when}",
        "clean the {room}",
        "get someone to fix the {appliance}",
        "pick up dry cleaning {when}",
        "take {pet} to the vet for shots",
        "dinner with {person} at {time}",
        "return the {return_item} to {store}",
        "order {household} on Amazon",
        "haircut at {salon} {when}",
        "parent-teacher conference for {kid} {when}",
        "help {kid} with {kid_subject} homework",
        "sign {kid}'s field trip form",
        "call the landlord about the {appliance}",
        "plumber coming {when}, be home",
        "movie night with {person} {when}",
        "pick up the package at {pickup}",
        "make {dish} for dinner",
        "thank-you card for {person}",
        "RSVP to {person}'s wedding",
        "pick up {family} from the airport {when}",
        "plan {family}'s birthday party",
        "oil change for the car {when}",
        "bake {dish_bake} for the potluck",
        "feed {pet} before leaving",
        "buy {gift} for {family}",
        "get {kid_stuff} for {kid} before school starts",
        "sign {kid} up for {kid_activity}",
        "brunch with {person} at {restaurant}",
        "assemble the {furniture} from IKEA",
        "{household} from {store}",
        "have {person} over for {dish} {when}",
        "ask {person} to feed {pet} this weekend",
        "clean out the {room} before {family} visits",
    ],
    ("life", "zh"): [
        "买{grocery}和{grocery}",
        "下班顺路买{grocery}",
        "{when}给{family}打电话",
        "找物业修{appliance}",
        "取快递，在{pickup}",
        "给{family}买生日礼物",
        "订{restaurant}，给{family}过生日",
        "{when}洗衣服",
        "大扫除，重点收拾{room}",
        "带{pet}去打疫苗",
        "{kid}家长会，{when}",
        "陪{kid}写{kid_subject}作业",
        "给{kid}报个{kid_activity}班",
        "给{kid}买{kid_stuff}",
        "约{person}{when}吃饭",
        "{when}去理发",
        "车该保养了，约{when}",
        "去{store}退{return_item}",
        "{appliance}坏了，叫人来修",
        "晚上做{dish}",
        "{when}去机场接{family}",
        "参加{person}的婚礼，准备红包",
        "找房东谈续租",
        "搬家前把{room}的东西打包",
        "去{store}买{household}",
        "给{pet}买{pet_food}",
        "{when}带{family}去{leisure}",
        "{kid}的{kid_form}要签字",
        "{family}的生日蛋糕{when}去取",
        "约{person}{when}看电影",
        "网购{household}",
        "预约{when}上门保洁",
        "去{pickup}寄快递给{family}",
        "{when}{family}来家里吃饭，买点{grocery}",
        "{when}送{kid}去{kid_activity}课",
        "冰箱里没{grocery}了",
        "{kid}开学要带{kid_stuff}",
    ],
    ("study", "en"): [
        "read chapter {n} of {textbook}",
        "review {subject} notes for {exam}",
        "finish {subject} problem set {n}",
        "buy the {subject} textbook",
        "email Prof. {prof} about {prof_topic}",
        "submit the {subject} assignment on {platform} {when}",
        "study for the {cert} exam",
        "do {n}0 Anki cards for {language}",
        "practice {language} on Duolingo",
        "watch lecture {n} of {course}",
        "register for {course} before the deadline",
        "pay tuition for the {term} semester",
        "office hours with Prof. {prof} at {time}",
        "group study with {person} in the library {when}",
        "write the intro of the {subject} essay",
        "thesis: {thesis_task}",
        "book a study room at the library {when}",
        "return {textbook} to the library",
        "read the {paper} paper and take notes",
        "memorize {n}0 {language} vocab words",
        "{n} LeetCode problems on {cs_topic}",
        "finish the {course} module on {topic}",
        "prep presentation for the {subject} seminar",
        "print the {subject} lecture slides",
        "ask {person} for last week's {subject} notes",
        "{language} tutor at {time}",
        "retake the {subject} quiz",
        "flashcards for {subject} {exam}",
        "apply for {scholarship}",
        "learn {skill} basics",
        "{cert} mock test {when}",
        "rewatch the lecture on {topic}",
        "summarize chapter {n} of {textbook}",
        "finish the {subject} lab report",
        "sign up for the {cert} exam",
        "pay the {cert} exam fee",
        "ask the TA about {subject} grading",
        "read {n}0 pages of {textbook}",
        "practice problems on {topic} for {exam}",
        "{subject} group project meeting with {person} at {time}",
    ],
    ("study", "zh"): [
        "复习{subject}第{n}章",
        "做{subject}课后习题",
        "背{n}0个{language}单词",
        "{when}交{subject}作业",
        "买{subject}教材",
        "报名{exam}",
        "交{term}学费",
        "预习{subject}明天的课",
        "去图书馆还{book}",
        "看{course}第{n}讲",
        "整理{subject}笔记",
        "{when}约{person}去图书馆自习",
        "给{prof}发邮件问{prof_topic}",
        "论文{thesis_task}",
        "刷{n}道LeetCode",
        "{exam}真题做一套",
        "练{language}口语",
        "{when}占图书馆座位",
        "打印{subject}的课件",
        "准备{subject}课的presentation",
        "{course}打卡第{n}天",
        "读{paper}论文，做笔记",
        "学{skill}，{when}开始",
        "准备奖学金申请材料，找{prof}签字",
        "{exam}倒计时{n}天",
        "借{person}的{subject}笔记",
        "问{prof}{subject}期中考范围",
        "交{exam}报名费",
        "{subject}小组作业跟{person}分工",
        "{when}上{language}网课",
        "整理{subject}错题本",
        "找{prof}签选课单",
        "下载{subject}的文献",
        "{exam}听力练{n}篇",
        "{subject}第{n}章的公式背一下",
    ],
    ("health", "en"): [
        "book dentist cleaning {when}",
        "take {medicine} {freq}",
        "refill {medicine} at {pharmacy}",
        "{exercise} {when}",
        "gym at {time}",
        "book a {fit_class} class {when}",
        "drink {n} glasses of water",
        "annual physical {when}",
        "call Dr. {doctor} about {symptom}",
        "fasting blood test {when}, no breakfast",
        "schedule an eye exam {when}",
        "log calories in MyFitnessPal",
        "meal prep {diet} lunches for the week",
        "buy {supplement}",
        "in bed by {bedtime}",
        "{n} min meditation",
        "flu shot at {pharmacy}",
        "take {family} to the {specialist}",
        "therapy session {when}",
        "physio exercises for my {bodypart}",
        "hit 10k steps {when}",
        "stretch {bodypart} before bed",
        "ask the pharmacist if {medicine} is ok with {medicine}",
        "ice my {bodypart}",
        "buy {gear}",
        "sign up for the {race}",
        "check blood pressure {when}",
        "book a massage for my {bodypart}",
        "follow-up with Dr. {doctor} re {symptom}",
        "no {vice} {when}",
        "{exercise} with {person} at {time}",
        "remind {family} to take {medicine}",
        "get {family}'s {medicine} refilled",
        "get a {test} done",
        "pay the {amt} copay at the clinic",
        "train for the {race}: {exercise}",
        "see the {specialist} about {symptom}",
        "{diet} dinner, no takeout",
    ],
    ("health", "zh"): [
        "约牙医洗牙，{when}",
        "吃{medicine}，{freq}",
        "去医院复查{body}",
        "{when}体检，空腹",
        "{exercise}{duration}",
        "健身房练{muscle}",
        "约{when}的私教课",
        "今天喝够{n}杯水",
        "{bedtime}前睡觉",
        "买{gear}",
        "打{vaccine}疫苗{dose}",
        "带{family}去医院看{symptom}",
        "挂{department}的号",
        "戒糖第{n}天",
        "准备一周的减脂餐",
        "{when}量血压",
        "冥想{n}分钟",
        "{when}取体检报告",
        "{when}去做针灸",
        "跑步{n}公里",
        "网上问诊，{symptom}",
        "去眼镜店验光",
        "报名{race}",
        "给{family}买{medicine}",
        "{exercise}打卡",
        "{symptom}好几天了，{when}去看看",
        "约{person}{when}去{exercise}",
        "预约{department}专家号",
        "复诊带上病历，{when}",
        "拉伸{n}分钟",
        "少吃{vice}",
        "{family}的{medicine}快吃完了，去开药",
        "{when}做{body}B超",
        "吃完{medicine}不要喝酒",
        "问医生{medicine}能不能和{medicine}一起吃",
    ],
    ("finance", "en"): [
        "pay the {bill} bill",
        "pay rent {when}",
        "transfer {amt} to savings",
        "pay {person} back {amt} for {shared}",
        "split {shared} with {person} on Venmo",
        "gather {tax_doc} for taxes",
        "check the card statement for the {merchant} charge",
        "dispute the {amt} charge from {merchant}",
        "set up autopay for the {bill} bill",
        "move {amt} into the index fund",
        "rebalance the 401k",
        "buy {n} shares of {stock}",
        "sell {stock} if it drops below {amt}",
        "update the monthly budget spreadsheet",
        "call {bank} about the {bank_issue}",
        "cancel the {subscription} subscription",
        "renew {insurance} insurance",
        "submit the insurance claim for {claim}",
        "put {amt} aside for the {city} trip",
        "pay off {amt} of the car loan",
        "check if the paycheck cleared",
        "order a new debit card from {bank}",
        "compare mortgage rates at {bank}",
        "send {amt} to {family}",
        "deposit {person}'s check",
        "contribute {amt} to the Roth IRA",
        "estimated tax payment due {when}",
        "HSA contribution {amt}",
        "ask {person} to Venmo me {amt} for {shared}",
        "budget: cap eating out at {amt} this month",
        "check {bank} balance before rent",
        "pay the {amt} parking ticket",
        "review {merchant} charges on the Amex",
        "track spending {when}",
        "{person} owes me {amt} for {shared}",
        "compare {insurance} insurance quotes",
        "{bill} bill is {amt} this month??",
    ],
    ("finance", "zh"): [
        "{when}还{bank}信用卡",
        "交房租{amt}",
        "交{utility}费",
        "给{person}转{amt}",
        "还{person}{amt}",
        "{shared}的钱AA一下，找{person}收",
        "基金定投{amt}",
        "买点{fund}",
        "把这个月的账记一下",
        "个税年度汇算，{when}",
        "查一下{bank}的流水",
        "取消{subscription}自动续费",
        "交{insurance}保费",
        "{claim}的钱走医保报销",
        "存{amt}到余额宝",
        "每月攒{amt}，年底去{city}",
        "房贷提前还款，问一下{bank}",
        "查工资到账没",
        "提取公积金{amt}",
        "给{family}打{amt}生活费",
        "换{bank}的储蓄卡",
        "理财产品到期，{when}续买",
        "{when}还花呗",
        "{stock}跌破{price}就卖",
        "信用卡账单有笔{amt}看不懂，问{bank}客服",
        "{when}交{utility}费，{amt}",
        "{stock}加仓",
        "申请退{subscription}的会员费",
        "本月预算还剩{amt}",
        "{insurance}理赔材料交一下",
        "借{person}的{amt}{when}还",
        "绑定{bank}卡到支付宝",
        "{when}扣款日，{bank}卡存够钱",
        "{person}还欠我{amt}，{shared}的",
        "{fund}收益看一下",
    ],
    ("travel", "en"): [
        "book flight to {city} {when}",
        "pay for the flight to {city}",
        "book a hotel in {city} for {n} nights",
        "renew passport before the {city} trip",
        "apply for the {country} visa",
        "online check-in for the {airline} flight",
        "pack {pack_item} for {city}",
        "buy a travel adapter for {country}",
        "get travel insurance for {country}",
        "exchange ${n}00 to {currency}",
        "rental car pickup in {city} at {time}",
        "print boarding passes for {airline}",
        "things to do in {city}",
        "book {landmark} tickets",
        "train to {city} at {time}",
        "leave for the airport by {time}",
        "Airbnb in {city} for {n} nights",
        "cancel the {city} hotel",
        "get an eSIM for {country}",
        "itinerary for {city}, day {n}",
        "business trip to {city}: book flight + hotel",
        "book a hotel near the conference center in {city}",
        "request an aisle seat on the {airline} flight",
        "{city} trip: confirm the {lodging} booking",
        "research day trips from {city}",
        "pay the Airbnb balance for {city}",
        "ask {person} for {city} restaurant recs for the trip",
        "arrange airport transfer in {city}",
        "check baggage allowance for {airline}",
        "buy a {travel_gear} for the trip",
        "road trip to {city} {when}",
        "ferry tickets to {island}",
        "book the {city} to {city} train",
        "get {currency} at the airport",
        "check {country} entry requirements",
        "refund for the cancelled {airline} flight",
        "share the {city} itinerary with {person}",
        "{lodging} in {city}, {n} nights",
    ],
    ("travel", "zh"): [
        "订去{city}的机票",
        "续签护照，{when}去{abroad}",
        "办{country}签证",
        "订去{abroad}的往返机票",
        "订{city}的酒店，住{n}晚",
        "抢{when}回{city}的高铁票",
        "收拾去{abroad}的行李",
        "换点{currency}，{when}去{abroad}",
        "买{country}的流量卡",
        "做{city}旅游攻略",
        "{city}民宿付尾款",
        "{abroad}的酒店订了没，问{person}",
        "{airline}航班值机选座",
        "出差去{city}，订酒店",
        "{landmark}门票提前预约",
        "{city}租车，{when}取",
        "买旅游险，{country}行",
        "问{person}{city}有什么好玩的",
        "{holiday}去{city}自驾",
        "查{city}机场大巴时间",
        "退{city}的机票",
        "{city}到{city}的动车票",
        "{city}几号出发，跟{person}确认",
        "{holiday}机票比价",
        "{city}的行程发给{person}",
        "订{city}到{city}的机票，{when}出发",
        "准备{country}入境材料",
        "带{pack_item}，去{city}",
        "给{family}订回{city}的火车票",
        "{city}的酒店能不能免费取消，查一下",
        "{city}三日游路线",
        "买去{island}的船票",
        "{when}飞{city}，提前两小时到机场",
        "{holiday}{country}签证还没下来，催一下",
    ],
}

# ---------------------------------------------------------------------------
# Hand-written whole sentences (used once each).  Written with their own casing.
# ---------------------------------------------------------------------------
WHOLE = {
    ("work", "en"): [
        "standup notes",
        "clear inbox before lunch",
        "set OOO reply",
        "quarterly OKRs draft",
        "ping legal about the NDA",
        "push the hotfix",
        "call the recruiter back about the offer",
        "update LinkedIn and resume",
        "prep for the performance review",
        "team lunch reservation for Friday",
        "ask boss about WFH on Thursday",
        "Jira cleanup",
        "on-call handoff",
        "Email the Q3 deck to Lisa before Friday's standup",
        "reimburse the Uber receipts from the conference",
        "sign the offer letter and send it back to HR",
        "collect feedback on the new logo",
        "figure out why the nightly build is red",
        "upload receipts to Concur",
        "slides!!",
        "quarterly numbers for the board",
        "rewrite the job posting for the sales role",
        "check the server logs",
        "coffee chat w/ new hire",
        "expense the hotel from the Denver offsite",
        "ask manager about the promo timeline",
        "renew my work visa paperwork with HR",
        "book travel through the company portal for the sales kickoff",
    ],
    ("work", "zh"): [
        "周五之前把季度报告发给王经理",
        "打卡",
        "明天 review 一下 PR",
        "写周报",
        "开会记得带电脑",
        "回复客户微信",
        "OKR自评",
        "年终述职准备",
        "下午两点评审会",
        "整理邮箱",
        "问一下老板周四能不能在家办公",
        "团建地点定一下",
        "上传报销单到系统",
        "跟进合同盖章",
        "钉钉审批处理掉",
        "加班把方案改完",
        "服务器告警看一下",
        "约猎头聊聊",
        "给团队订周五的午饭",
        "下周出差的工作安排跟同事说一下",
        "报销上个月出差的机票",
        "改简历",
        "年终奖的事问下HR",
        "把客户的发票寄出去",
        "申请出差审批",
    ],
    ("life", "en"): [
        "walk the dog",
        "water the plants",
        "change bedsheets",
        "call mom",
        "fix the squeaky door",
        "defrost the chicken",
        "buy groceries",
        "cancel plans w/ Jake, reschedule",
        "put snow tires on",
        "pick up keys from the landlord",
        "mow the lawn",
        "take the recycling out",
        "text Sarah happy birthday",
        "Book a table for mom's birthday",
        "find a babysitter for Saturday night",
        "tidy up before guests come",
        "replace smoke detector battery",
        "get a spare key made",
        "Christmas cards",
        "call grandma!!",
        "wash the car",
        "new phone case",
        "look for a new couch",
        "pack lunch for the kids",
        "renew the apartment lease",
        "drop off old clothes at Goodwill",
        "schedule the piano tuner",
        "buy a gift for the baby shower",
    ],
    ("life", "zh"): [
        "倒垃圾",
        "浇花",
        "遛狗",
        "换床单",
        "给妈妈打个电话",
        "修一下厨房的水龙头",
        "买菜",
        "想一下晚饭吃什么",
        "周末回爸妈家",
        "衣柜换季整理",
        "给阳台的花施肥",
        "充电宝还给小刘",
        "配一把备用钥匙",
        "问邻居能不能帮忙收快递",
        "冰箱除霜",
        "跟老婆商量国庆去谁家",
        "给女儿剪指甲",
        "约闺蜜下午茶☕",
        "明天记得带伞",
        "猫砂该换了",
        "找个阿姨做饭",
        "洗车",
        "周六同学聚会",
        "给狗狗洗澡",
        "家里的绿萝换个盆",
        "把旧衣服捐了",
    ],
    ("study", "en"): [
        "read ch 5",
        "quiz tmrw!!",
        "finish essay draft",
        "GRE vocab",
        "study group 7pm",
        "Review linear algebra chapter 3",
        "find a thesis topic",
        "return library books",
        "highlight the reading for seminar",
        "ask about the exam format",
        "cite sources in APA",
        "hand in lab report",
        "apply to grad school",
        "Spanish homework",
        "finish Coursera quiz",
        "make a study schedule for finals",
        "redo the practice midterm",
        "email advisor",
        "buy a graphing calculator",
        "renew student ID",
        "write 500 words for the thesis",
        "go over mistakes on the last exam",
        "ask Prof about the curve",
        "look up the syllabus for next term",
        "transcript request for the grad application",
    ],
    ("study", "zh"): [
        "复习线性代数第三章",
        "背单词",
        "四级听力练一套",
        "考研政治背一遍",
        "高数作业",
        "写实验报告",
        "改论文",
        "预约答辩时间",
        "买个护眼台灯看书用",
        "选课",
        "期末周计划表做一下",
        "单词打卡",
        "去教务处盖章",
        "查四六级成绩",
        "问学长要笔记",
        "下载往年试卷",
        "雅思作文改一篇",
        "网课补签到",
        "学校邮箱激活",
        "网课视频倍速刷完",
        "去自习室",
        "写读书报告",
        "考研择校再想想",
        "导师组会汇报准备",
    ],
    ("health", "en"): [
        "leg day",
        "vitamins",
        "dentist!!",
        "Book dentist cleaning for next Tuesday",
        "go to bed before midnight",
        "no screens after 11",
        "floss",
        "weigh in tomorrow morning",
        "rest day, just stretch",
        "make a therapist appointment",
        "track my period",
        "eat more veggies this week",
        "foam roll calves",
        "cut back on coffee",
        "walk at lunch",
        "refill inhaler",
        "get hearing checked",
        "allergy shot Thursday",
        "wear the knee brace",
        "ask doc about the mole",
        "water 2L",
        "couch to 5k week 3",
        "take mom's blood pressure",
        "find a new GP",
        "ask the nurse line about the fever",
    ],
    ("health", "zh"): [
        "吃维生素",
        "早睡",
        "体检",
        "少喝奶茶",
        "今天练腿",
        "预约胃镜",
        "去药店买创可贴",
        "牙疼，约口腔医院",
        "帕梅拉跟练",
        "每天一万步",
        "称体重",
        "护肝片记得吃",
        "睡前不刷手机",
        "晚饭后散步半小时",
        "滴眼药水",
        "给爸测血糖",
        "跑步机30分钟",
        "去做个肩颈按摩",
        "喝中药",
        "Keep打卡",
        "核心训练15min",
        "月经推迟了，记录一下",
        "戒烟第三天，坚持",
        "约心理咨询",
    ],
    ("finance", "en"): [
        "Pay the credit card bill",
        "taxes!!",
        "venmo Jake",
        "budget review",
        "check stocks",
        "cancel Hulu",
        "call the bank",
        "update net worth spreadsheet",
        "property tax due",
        "shred old bank statements",
        "find last year's tax return",
        "ask accountant about deductions",
        "move emergency fund to HYSA",
        "pay back mom",
        "review the car insurance quote",
        "student loan payment",
        "check credit score",
        "set savings goals for next year",
        "Pay the electricity bill before the 20th",
        "Rent due",
        "split utilities with roommates",
        "crypto: take profits?",
        "ask HR about the 401k match",
        "pay the vet bill on the card",
        "return money to Tom for the concert",
    ],
    ("finance", "zh"): [
        "还信用卡",
        "记账",
        "交房租",
        "花呗还款",
        "看一下基金收益",
        "个税APP退税",
        "取消视频会员自动续费",
        "交水电燃气费",
        "给爸妈转钱",
        "工资卡换成招行的",
        "年终奖存定期",
        "算一下这个月花了多少",
        "共同账户的钱对一下",
        "交停车罚款200",
        "查征信报告",
        "问问车贷还剩多少",
        "保险续费",
        "理财经理回电话",
        "开个养老金账户",
        "医保卡充值",
        "房贷利率下调了，申请一下",
        "孩子的教育金保险了解一下",
    ],
    ("travel", "en"): [
        "passport!!",
        "packing list",
        "Renew passport",
        "print hotel confirmation",
        "book flights for Thanksgiving",
        "download offline maps",
        "Global Entry interview",
        "check flight status",
        "buy a bigger suitcase",
        "where to stay in Kyoto",
        "JR pass",
        "weekend getaway ideas",
        "book camping spot at Yosemite",
        "Pay for the flight to Osaka",
        "how to get from the airport to the hotel",
        "honeymoon planning",
        "visa photos",
        "hold mail while we're away",
        "find a pet sitter for the trip",
        "tell the bank about travel dates",
        "cruise excursion booking",
        "pick a seat on the red-eye",
        "ski trip lodging",
    ],
    ("travel", "zh"): [
        "续签护照，下个月去东京",
        "收拾行李",
        "12306候补",
        "旅行箱买个大的",
        "查航班动态",
        "下载离线地图",
        "签证照片",
        "订机场停车",
        "国际驾照翻译件",
        "下个月去哪玩",
        "订露营地",
        "蜜月行程",
        "行李超重了问一下",
        "景区门票买学生票",
        "酒店含不含早问一下",
        "提前值机",
        "出发前看天气",
        "春节回家的票",
        "护照签证复印件准备一下",
        "港澳通行证续签",
        "邮轮行程确认",
        "给爸妈报个夕阳红旅行团",
    ],
}

# ---------------------------------------------------------------------------
# Surface-style variation.
# ---------------------------------------------------------------------------
EN_PREFIXES = ["todo: ", "TODO ", "reminder: ", "- ", "[ ] ", "note: "]
ZH_PREFIXES = ["记得", "别忘了", "提醒：", "待办：", "TODO "]
EMOJI_ANY = ["📌", "✅", "❗", "🙏", "😅", "⏰"]
EMOJI_CLASS = {"work": "💼", "life": "🏠", "study": "📚", "health": "💪", "finance": "💰", "travel": "✈️"}
SLOT_RE = re.compile(r"\{(\w+)\}")
KEY_RE = re.compile(r"[^0-9a-z\u4e00-\u9fff]+")


def norm_key(text: str) -> str:
    """Duplicate key: case-, space-, punctuation- and emoji-insensitive."""
    return KEY_RE.sub("", text.lower())


def fill(template: str, lang: str, rng: random.Random) -> str:
    used: dict[str, set] = {}

    def repl(m: re.Match) -> str:
        slot = m.group(1)
        if slot in NUMBER_SLOTS:
            lo, hi = NUMBER_SLOTS[slot]
            return str(rng.randint(lo, hi))
        choices = FILLERS[lang][slot]
        seen = used.setdefault(slot, set())
        for _ in range(10):  # same slot twice -> different values
            value = rng.choice(choices)
            if value not in seen or not value:
                break
        seen.add(value)
        return value

    text = SLOT_RE.sub(repl, template)
    if lang == "en":
        text = re.sub(r"\s+", " ", text).strip()
        text = re.sub(r"\s+([,:?!])", r"\1", text)
        text = text.rstrip(",: ")
    else:
        text = re.sub(r"\s+", " ", text).strip()
        text = re.sub(r"^[，、\s]+|[，、\s]+$", "", text)
        text = text.replace("，，", "，")
    return text


def typo(text: str, rng: random.Random) -> str:
    """Swap two adjacent letters, or drop one, inside one longer word."""
    words = text.split(" ")
    idx = [i for i, w in enumerate(words) if len(w) >= 5 and w.isalpha()]
    if not idx:
        return text
    i = rng.choice(idx)
    w = words[i]
    j = rng.randrange(1, len(w) - 2)
    if rng.random() < 0.6:
        w = w[:j] + w[j + 1] + w[j] + w[j + 2 :]
    else:
        w = w[:j] + w[j + 1 :]
    words[i] = w
    return " ".join(words)


def style(text: str, label: str, lang: str, whole: bool, rng: random.Random) -> str:
    if lang == "en":
        r = rng.random()
        if r < 0.18:
            text = text.lower()
        elif not whole and r < 0.75:
            text = text[:1].upper() + text[1:]
        if rng.random() < 0.04:
            text = typo(text, rng)
        if rng.random() < 0.06:
            text = rng.choice(EN_PREFIXES) + text
        r = rng.random()
        if text[-1:] not in "!?.":
            if r < 0.08:
                text += "."
            elif r < 0.11:
                text += "!"
            elif r < 0.13:
                text += " asap"
    else:
        if rng.random() < 0.07:
            text = rng.choice(ZH_PREFIXES) + text
        r = rng.random()
        if text[-1:] not in "！？。!?":
            if r < 0.10:
                text += "。"
            elif r < 0.13:
                text += "！"
            elif r < 0.15:
                text += "!!"
    if rng.random() < 0.02:
        text += " " + (EMOJI_CLASS[label] if rng.random() < 0.5 else rng.choice(EMOJI_ANY))
    return text


# ---------------------------------------------------------------------------
# Generation.
# ---------------------------------------------------------------------------
def cell_targets(rng: random.Random) -> dict:
    """Number of items per (split, label, lang)."""
    total_w = sum(CLASS_WEIGHT.values())
    targets = {}
    for split, size in SPLIT_SIZES.items():
        for label in LABELS:
            n_label = round(size * CLASS_WEIGHT[label] / total_w)
            zh_share = rng.uniform(0.46, 0.54)
            n_zh = round(n_label * zh_share)
            targets[(split, label, "zh")] = n_zh
            targets[(split, label, "en")] = n_label - n_zh
    return targets


def check_tables() -> None:
    for (label, lang), temps in TEMPLATES.items():
        assert label in LABELS and lang in LANGS, (label, lang)
        for t in temps:
            for slot in SLOT_RE.findall(t):
                assert slot in NUMBER_SLOTS or slot in FILLERS[lang], (label, lang, t, slot)
    for key in TEMPLATES:
        assert key in WHOLE, key


def generate() -> dict:
    check_tables()
    rng = random.Random(SEED)
    targets = cell_targets(rng)
    seen: set = set()
    out = {split: [] for split in SPLIT_SIZES}
    pools = {}

    # 1) template hold-out + whole-sentence assignment, per (label, lang)
    for label in LABELS:
        for lang in LANGS:
            temps = list(TEMPLATES[(label, lang)])
            rng.shuffle(temps)
            k = round(len(temps) * HELDOUT_TEMPLATE_FRAC)
            held = temps[:k]
            pools[(label, lang)] = {
                "shared": temps[k:],
                "dev": held[0::2],
                "test": held[1::2],
            }
            whole = list(WHOLE[(label, lang)])
            rng.shuffle(whole)
            n_train = round(len(whole) * WHOLE_SPLIT_SHARE["train"])
            n_dev = round(len(whole) * WHOLE_SPLIT_SHARE["dev"])
            parts = {
                "train": whole[:n_train],
                "dev": whole[n_train : n_train + n_dev],
                "test": whole[n_train + n_dev :],
            }
            # whole sentences first, so templates never crowd them out
            for split, sents in parts.items():
                for s in sents:
                    text = style(s, label, lang, True, rng)
                    key = norm_key(text)
                    assert key not in seen, f"duplicate whole sentence: {s}"
                    seen.add(key)
                    out[split].append({"text": text, "label": label, "lang": lang})

    # 2) fill each cell up to its target from templates
    for split in SPLIT_SIZES:
        for label in LABELS:
            for lang in LANGS:
                pool = pools[(label, lang)]
                have = sum(1 for r in out[split] if r["label"] == label and r["lang"] == lang)
                need = targets[(split, label, lang)] - have
                exhausted: set = set()
                tries = 0
                while need > 0:
                    tries += 1
                    if tries > 200000:
                        raise RuntimeError(f"cannot fill {split}/{label}/{lang}")
                    if split != "train" and pool[split] and rng.random() < P_HELDOUT:
                        cands = pool[split]
                    else:
                        cands = pool["shared"]
                    t = rng.choice(cands)
                    if t in exhausted:
                        continue
                    for _ in range(30):
                        text = style(fill(t, lang, rng), label, lang, False, rng)
                        key = norm_key(text)
                        if key not in seen:
                            break
                    else:
                        exhausted.add(t)
                        continue
                    seen.add(key)
                    out[split].append({"text": text, "label": label, "lang": lang})
                    need -= 1

    for split in SPLIT_SIZES:
        rng.shuffle(out[split])
    return out


def counts_table(out: dict) -> str:
    lines = ["| split | " + " | ".join(LABELS) + " | total |", "|---|" + "---|" * (len(LABELS) + 1)]
    for split, rows in out.items():
        cells = []
        for label in LABELS:
            en = sum(1 for r in rows if r["label"] == label and r["lang"] == "en")
            zh = sum(1 for r in rows if r["label"] == label and r["lang"] == "zh")
            cells.append(f"{en + zh} ({en} en / {zh} zh)")
        lines.append(f"| {split} | " + " | ".join(cells) + f" | {len(rows)} |")
    return "\n".join(lines)


def main() -> None:
    out = generate()
    for split, rows in out.items():
        path = OUT_DIR / f"{split}.jsonl"
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    n_templates = sum(len(v) for v in TEMPLATES.values())
    n_whole = sum(len(v) for v in WHOLE.values())
    print(f"seed {SEED}: {n_templates} templates, {n_whole} whole sentences", file=sys.stderr)
    print(counts_table(out))


if __name__ == "__main__":
    main()
